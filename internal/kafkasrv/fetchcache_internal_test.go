package kafkasrv

import (
	"testing"

	"github.com/pgmsg/pgmsg/internal/store"
)

// A window over its bound drops its oldest records down to
// fetchWindowTrimBytes at once, keeps room to append to, and leaves the
// records already handed out as they were.
func TestFetchWindowTrim(t *testing.T) {
	c := &fetchCache{max: 1 << 40}
	w := &fetchWindow{first: 0, last: -1}
	val := make([]byte, 1024)
	add := func(n int) {
		for range n {
			r := store.KafkaRecord{Offset: w.last + 1, Value: val}
			w.recs = append(w.recs, r)
			w.bytes += recordBytes(&r)
			c.bytes += recordBytes(&r)
			w.last++
		}
		c.trim(w)
	}
	per := recordBytes(&store.KafkaRecord{Value: val})
	full := int(fetchWindowMaxBytes / per)
	add(full)
	if w.first != 0 || len(w.recs) != full {
		t.Fatalf("a window within its bound was trimmed: first %d, %d records", w.first, len(w.recs))
	}
	held := w.recs[:10:10]
	add(1)
	if w.bytes > fetchWindowTrimBytes || w.bytes < fetchWindowTrimBytes-per {
		t.Fatalf("trimmed to %d bytes, want just under %d", w.bytes, fetchWindowTrimBytes)
	}
	if w.first != w.recs[0].Offset || w.last != w.recs[len(w.recs)-1].Offset || int64(len(w.recs)) != w.last-w.first+1 {
		t.Fatalf("window %d..%d holds offsets %d..%d (%d records)", w.first, w.last, w.recs[0].Offset, w.recs[len(w.recs)-1].Offset, len(w.recs))
	}
	if c.bytes != w.bytes {
		t.Fatalf("cache counts %d bytes, window %d", c.bytes, w.bytes)
	}
	for i, r := range held {
		if r.Offset != int64(i) {
			t.Fatalf("a record handed out before the trim changed: %d at %d", r.Offset, i)
		}
	}
	// The next reads append without copying the window again.
	before := &w.recs[0]
	add(100)
	if &w.recs[0] != before {
		t.Fatal("appending after a trim copied the window")
	}
}
