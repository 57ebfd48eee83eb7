package kafkasrv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Compression codecs of a record batch (its attributes' low three bits).
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLz4    = 3
	codecZstd   = 4
)

var (
	errTooLarge     = errors.New("batch decompresses to more than allowed")
	errUnknownCodec = errors.New("unknown compression codec")
)

// xerialMagic starts snappy data framed the way the Java client frames it
// (xerial snappy-java); a batch without it is one raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		panic(err) // only bad options fail
	}
	return d
}}

// decompress returns the records of a batch compressed with codec, never
// more than max bytes of them: a batch that would decompress to more is
// refused before (snappy, zstd: their declared size) or while (gzip, lz4)
// it is inflated.
func decompress(codec int, src []byte, max int) ([]byte, error) {
	switch codec {
	case codecNone:
		return src, nil
	case codecGzip:
		r, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, err
		}
		return readBounded(r, max)
	case codecSnappy:
		if len(src) >= 16 && bytes.HasPrefix(src, xerialMagic) {
			return xerialDecode(src[16:], max)
		}
		return snappyBlock(nil, src, max)
	case codecLz4:
		return readBounded(lz4.NewReader(bytes.NewReader(src)), max)
	case codecZstd:
		d := zstdDecoders.Get().(*zstd.Decoder)
		defer zstdDecoders.Put(d)
		// The frame's declared size is checked first; a frame without one
		// is inflated through a bounded reader.
		var h zstd.Header
		if err := h.Decode(src); err == nil && h.HasFCS && h.FrameContentSize > uint64(max) {
			return nil, errTooLarge
		}
		if err := d.Reset(bytes.NewReader(src)); err != nil {
			return nil, err
		}
		return readBounded(d.IOReadCloser(), max)
	}
	return nil, errUnknownCodec
}

func readBounded(r io.Reader, max int) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(out) > max {
		return nil, errTooLarge
	}
	return out, nil
}

func snappyBlock(dst, src []byte, max int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n > max-len(dst) {
		return nil, errTooLarge
	}
	out, err := s2.Decode(nil, src)
	if err != nil {
		return nil, err
	}
	return append(dst, out...), nil
}

// xerialDecode decodes xerial's chunks: a big-endian length, then a raw
// snappy block of it, repeated.
func xerialDecode(src []byte, max int) ([]byte, error) {
	var out []byte
	for len(src) > 0 {
		if len(src) < 4 {
			return nil, io.ErrUnexpectedEOF
		}
		n := binary.BigEndian.Uint32(src)
		src = src[4:]
		if uint64(n) > uint64(len(src)) {
			return nil, io.ErrUnexpectedEOF
		}
		var err error
		if out, err = snappyBlock(out, src[:n], max); err != nil {
			return nil, err
		}
		src = src[n:]
	}
	return out, nil
}
