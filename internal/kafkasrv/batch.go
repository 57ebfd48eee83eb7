package kafkasrv

import (
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batchHeaderLen is the size of a v2 record batch before its records.
const batchHeaderLen = 61

// Batch attributes.
const (
	attrCodec         = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// batch is one produced record batch, decoded.
type batch struct {
	producerID    int64
	producerEpoch int16
	firstSequence int32
	transactional bool
	records       []*pgmsg.Record
}

// batchError is why a partition's records were refused: a Kafka error
// code and a message for versions that carry one.
type batchError struct {
	code int16
	msg  string
}

// decodeBatches decodes the record batches of one partition of a Produce
// request. Every check runs before anything is stored: a malformed
// batch, a CRC mismatch or a batch that decompresses to more than max
// bytes refuses the partition's records, all of them.
func decodeBatches(raw []byte, topic string, partition int32, max int) ([]batch, *batchError) {
	if len(raw) == 0 {
		return nil, &batchError{kerr.InvalidRecord.Code, "no record batch"}
	}
	var out []batch
	for len(raw) > 0 {
		if len(raw) < batchHeaderLen {
			return nil, &batchError{kerr.CorruptMessage.Code, "truncated record batch"}
		}
		length := int32(binary.BigEndian.Uint32(raw[8:12]))
		if length < batchHeaderLen-12 || int64(length) > int64(len(raw)-12) {
			return nil, &batchError{kerr.CorruptMessage.Code, "record batch length out of bounds"}
		}
		one := raw[:12+int(length)]
		raw = raw[12+int(length):]
		if one[16] != 2 {
			return nil, &batchError{kerr.UnsupportedForMessageFormat.Code, "only record batch v2 (magic 2) is accepted"}
		}
		if crc32.Checksum(one[21:], castagnoli) != binary.BigEndian.Uint32(one[17:21]) {
			return nil, &batchError{kerr.CorruptMessage.Code, "record batch CRC mismatch"}
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(one); err != nil {
			return nil, &batchError{kerr.CorruptMessage.Code, "malformed record batch"}
		}
		if rb.Attributes&attrControl != 0 {
			return nil, &batchError{kerr.InvalidRecord.Code, "control batches are written by brokers, not producers"}
		}
		data, err := decompress(int(rb.Attributes&attrCodec), rb.Records, max)
		switch {
		case err == errTooLarge:
			return nil, &batchError{kerr.MessageTooLarge.Code, "record batch decompresses to more than the largest request"}
		case err == errUnknownCodec:
			return nil, &batchError{kerr.UnsupportedCompressionType.Code, "unknown compression codec"}
		case err != nil:
			return nil, &batchError{kerr.CorruptMessage.Code, "record batch does not decompress: " + err.Error()}
		}
		// Each record is at least 7 bytes: the bound on what is allocated.
		if rb.NumRecords <= 0 || int64(rb.NumRecords) > int64(len(data)/7+1) {
			return nil, &batchError{kerr.CorruptMessage.Code, "record count does not match the batch"}
		}
		b := batch{producerID: rb.ProducerID, producerEpoch: rb.ProducerEpoch, firstSequence: rb.FirstSequence,
			transactional: rb.Attributes&attrTransactional != 0,
			records:       make([]*pgmsg.Record, 0, rb.NumRecords)}
		logAppend := rb.Attributes&attrLogAppendTime != 0
		for i := int32(0); i < rb.NumRecords; i++ {
			l, n := binary.Varint(data)
			if n <= 0 || l <= 0 || l > int64(len(data)-n) {
				return nil, &batchError{kerr.CorruptMessage.Code, "truncated record"}
			}
			var kr kmsg.Record
			if err := kr.ReadFrom(data[:n+int(l)]); err != nil {
				return nil, &batchError{kerr.CorruptMessage.Code, "malformed record"}
			}
			data = data[n+int(l):]
			rec := &pgmsg.Record{Topic: topic, Partition: partition, Key: kr.Key, Value: kr.Value}
			if !logAppend && rb.FirstTimestamp >= 0 {
				ms := rb.FirstTimestamp + kr.TimestampDelta64
				if ms >= 0 {
					rec.Timestamp = time.UnixMilli(ms)
				}
			}
			if len(kr.Headers) > 0 {
				rec.Headers = make(map[string][]byte, len(kr.Headers))
				for _, h := range kr.Headers {
					v := h.Value
					if v == nil {
						v = []byte{}
					}
					rec.Headers[h.Key] = v // a repeated key: the last one wins
				}
			}
			b.records = append(b.records, rec)
		}
		if len(data) != 0 {
			return nil, &batchError{kerr.CorruptMessage.Code, "bytes after the batch's last record"}
		}
		out = append(out, b)
	}
	return out, nil
}
