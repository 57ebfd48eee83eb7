package store

import "testing"

// A read that knows how many rows it returns allocates a chunk for them,
// not a fixed 256 KiB; one that does not, or whose rows are larger,
// allocates up to chunkMax, and a record larger than that gets its own.
func TestRecordDecoderChunkSize(t *testing.T) {
	for _, tc := range []struct {
		left       int64
		need, want int
	}{
		{left: 125, need: 1024, want: 125 * 1024},
		{left: 1, need: 10, want: 10},
		{left: 0, need: 10, want: chunkMax},
		{left: 100000, need: 1024, want: chunkMax},
		{left: 3, need: chunkMax + 1, want: chunkMax + 1},
	} {
		d := &recordDecoder{row: RecordRow{Left: tc.left}}
		d.reserve(tc.need)
		if cap(d.chunk) != tc.want {
			t.Errorf("left %d, need %d: chunk of %d bytes, want %d", tc.left, tc.need, cap(d.chunk), tc.want)
		}
		before := cap(d.chunk)
		d.chunk = append(d.chunk, make([]byte, tc.need)...)
		if tc.left > 1 && tc.want < chunkMax {
			d.reserve(tc.need) // the next row of the same size fits
			if cap(d.chunk) != before {
				t.Errorf("left %d, need %d: a new chunk for the second row", tc.left, tc.need)
			}
		}
	}
}
