package kafkasrv

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/store"
)

// The record cache: the members of several groups fetch the same records
// of a partition, one after the other, so the listener keeps the latest
// records it read of each partition, a window of consecutive offsets, and
// a Fetch takes from it what it holds instead of reading it again (the
// native client's record cache does the same for claims,
// internal/logread). Reads of one partition go one at a time, so that
// the groups woken by one publish read it once between them.
//
// A window is the partition's records as of one log epoch: the records
// at its offsets never change within the epoch (compaction removes some
// later, and a window may still hand out a record compaction removed, one
// a Fetch a moment earlier would have read). A new epoch (the first
// publish on a promoted standby, which may lack records the old primary
// had and gives their offsets to other records) drops the window, and no
// window serves offsets at or past the partition's high watermark as read
// by the Fetch, so a truncated log is never answered from memory. A topic
// deleted and created again has a new topic id, which windows are keyed by.
// The records handed out are shared and only read (appendBatch encodes
// them).

// fetchCacheBytesDefault is Config.FetchCacheBytes's default.
const fetchCacheBytesDefault = 64 << 20

// fetchWindowMaxBytes is the most bytes one partition's window keeps: it
// drops its oldest records beyond it.
const fetchWindowMaxBytes = 8 << 20

// fetchWindowTrimBytes is what a window over fetchWindowMaxBytes keeps:
// its newest records, a quarter less, so that it is trimmed (and its
// records copied) once per 2 MiB read, not on every read.
const fetchWindowTrimBytes = fetchWindowMaxBytes * 3 / 4

// cachedRecordOverhead is what a record costs beyond its key, value and
// headers.
const cachedRecordOverhead = 64

type fetchCache struct {
	max   int64 // 0: off
	mu    sync.Mutex
	win   map[tp]*fetchWindow
	bytes int64
	// served counts the records Fetches took from windows.
	served int64
	// swept is when window last forgot the idle windows.
	swept time.Time
}

// fetchWindowIdle is how long a window no Fetch uses is kept.
const fetchWindowIdle = time.Minute

// fetchWindow holds every record of offsets first..last of one partition
// (of topic id topicID, log epoch epoch) that exists. read serialises the
// partition's reads.
type fetchWindow struct {
	read sync.Mutex

	topicID     int32
	epoch       int32
	first, last int64
	recs        []store.KafkaRecord
	bytes       int64
	used        time.Time
}

func recordBytes(r *store.KafkaRecord) int64 {
	return int64(len(r.Key)+len(r.Value)+len(r.Headers)) + cachedRecordOverhead
}

// window returns the partition's window, made on first use.
func (c *fetchCache) window(key tp) *fetchWindow {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.win == nil {
		c.win = map[tp]*fetchWindow{}
	}
	now := time.Now()
	if now.Sub(c.swept) > fetchWindowIdle {
		// Forget the windows no Fetch used lately (a deleted topic's,
		// a partition nobody reads) unless a read holds one.
		c.swept = now
		for k, o := range c.win {
			if now.Sub(o.used) > fetchWindowIdle && o.read.TryLock() {
				c.bytes -= o.bytes
				delete(c.win, k)
				o.read.Unlock()
			}
		}
	}
	w := c.win[key]
	if w == nil {
		w = &fetchWindow{first: -1, last: -2}
		c.win[key] = w
	}
	w.used = now
	return w
}

// records returns up to n records of p from offset from, below p's next
// offset: all that exist there when fewer than n are returned. It takes
// what the partition's window holds and reads the rest with read, which
// it adds to the window.
func (s *Server) records(ctx context.Context, topic string, p store.KafkaPartition, from int64, n int32) ([]store.KafkaRecord, error) {
	c := &s.fetchCache
	read := func(from int64, n int32) ([]store.KafkaRecord, error) {
		recs, err := s.store.KafkaRecords(ctx, s.client.Pool(), p.TopicID, p.Partition, from, p.NextOffset, n)
		if err != nil {
			return nil, err
		}
		return s.completeRecords(ctx, topic, p, from, n, recs)
	}
	if c.max <= 0 {
		return read(from, n)
	}
	w := c.window(tp{topic, p.Partition})
	c.mu.Lock()
	stale := w.topicID != p.TopicID || w.epoch != p.LogEpoch
	if !stale && len(w.recs) > 0 && (from < w.first || from > w.last+1) {
		// A range the window does not touch (a group far behind or
		// ahead of the others): read it without the window.
		c.mu.Unlock()
		return read(from, n)
	}
	c.mu.Unlock()
	w.read.Lock()
	defer w.read.Unlock()

	c.mu.Lock()
	if w.topicID != p.TopicID || w.epoch != p.LogEpoch || from < w.first || from > w.last+1 {
		// Another topic or epoch, or an empty window: start it at from.
		c.bytes -= w.bytes
		w.topicID, w.epoch, w.first, w.last, w.recs, w.bytes = p.TopicID, p.LogEpoch, from, from-1, nil, 0
	}
	// The window's records from from on, below the high watermark.
	i := searchOffset(w.recs, from)
	j := i
	for j < len(w.recs) && int32(j-i) < n && w.recs[j].Offset < p.NextOffset {
		j++
	}
	held := w.recs[i:j:j]
	covered := min(w.last, p.NextOffset-1) // every record up to here is in held or absent
	c.served += int64(len(held))
	c.mu.Unlock()

	if int32(len(held)) == n || covered >= p.NextOffset-1 {
		return held, nil
	}
	more, err := read(covered+1, n-int32(len(held)))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Only a window still as it was extends: the read continued it at
	// w.last+1 (covered == w.last here).
	if w.last == covered && w.topicID == p.TopicID && w.epoch == p.LogEpoch {
		for k := range more {
			b := recordBytes(&more[k])
			w.bytes += b
			c.bytes += b
		}
		w.recs = append(w.recs, more...)
		if int32(len(more)) == n-int32(len(held)) {
			w.last = more[len(more)-1].Offset
		} else {
			w.last = p.NextOffset - 1
		}
		c.trim(w)
	}
	if len(held) == 0 {
		return more, nil
	}
	out := make([]store.KafkaRecord, 0, len(held)+len(more))
	return append(append(out, held...), more...), nil
}

// trim drops w's oldest records once it holds more than
// fetchWindowMaxBytes, down to fetchWindowTrimBytes, then the least
// recently used other windows while the cache is over its budget. c.mu
// is held.
//
// The records kept are copied to a new slice (Fetches may still be
// encoding the old one's), with room to append to: trimming to just
// under the bound, as it once did, copied the whole window twice on
// every read of a busy partition (the trim, then the next append's
// growth), a fifth of the listener's CPU at 5,000 writes/s read by 5
// groups.
func (c *fetchCache) trim(w *fetchWindow) {
	if w.bytes > fetchWindowMaxBytes {
		k := 0
		for w.bytes > fetchWindowTrimBytes && k < len(w.recs)-1 {
			b := recordBytes(&w.recs[k])
			w.bytes -= b
			c.bytes -= b
			k++
		}
		if k > 0 {
			w.first = w.recs[k-1].Offset + 1
			kept := len(w.recs) - k
			recs := make([]store.KafkaRecord, kept, kept+kept/2+16)
			copy(recs, w.recs[k:])
			w.recs = recs
		}
	}
	for c.bytes > c.max {
		var oldest *fetchWindow
		for _, o := range c.win {
			if o != w && o.bytes > 0 && (oldest == nil || o.used.Before(oldest.used)) {
				oldest = o
			}
		}
		if oldest == nil {
			return
		}
		c.bytes -= oldest.bytes
		// The window's reader may hold it: empty it rather than delete
		// it, so that a concurrent read does not extend a window that is
		// no longer counted.
		oldest.first, oldest.last, oldest.recs, oldest.bytes = -1, -2, nil, 0
	}
}

// searchOffset is the index of the first record of recs (in offset order)
// at or after offset.
func searchOffset(recs []store.KafkaRecord, offset int64) int {
	lo, hi := 0, len(recs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if recs[m].Offset < offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func kafkaOffset(r store.KafkaRecord) int64 { return r.Offset }

// completeRecords checks recs, a read of up to n records of p from
// offset from on (below p's high watermark): every offset from
// p.HolesBelow on is stored (store.MissesStored), so the read must hold
// every offset from there up to its last record, or up to the high
// watermark when it returned fewer than n. A read that missed stored
// records would hand the client a batch with a gap, or one that starts
// past its fetch offset, and a Kafka consumer fetches on from the last
// offset it was given + 1: it would skip the missing records for good
// (the record cache would also keep the gap for the other groups). The
// records from p.HolesBelow on are then read again from the segment
// tables the catalog names (store.ReadSegments); a read that still
// misses stored records fails the Fetch, and nothing is handed over.
func (s *Server) completeRecords(ctx context.Context, topic string, p store.KafkaPartition, from int64, n int32,
	recs []store.KafkaRecord) ([]store.KafkaRecord, error) {
	last := p.NextOffset - 1
	if int32(len(recs)) >= n && len(recs) > 0 {
		last = recs[len(recs)-1].Offset
	}
	if !store.MissesStored(recs, kafkaOffset, from, last, p.HolesBelow) {
		return recs, nil
	}
	// p may be an older read: compaction or retention may have moved
	// the partition's holesBelow on since.
	pool := s.client.Pool()
	_, holesBelow, err := s.store.RangeSegments(ctx, pool, p.TopicID, p.Partition, from, last)
	if err != nil {
		return nil, err
	}
	if !store.MissesStored(recs, kafkaOffset, from, last, holesBelow) {
		return recs, nil // compaction or retention left holes
	}
	// The records below holesBelow stay as read; the rest, up to n in
	// all, come from the segments.
	lo := max(from, holesBelow)
	keep := recs[:searchOffset(recs, lo)]
	hi := min(p.NextOffset-1, lo+int64(n)-int64(len(keep))-1)
	again := append(make([]store.KafkaRecord, 0, len(keep)+int(hi-lo+1)), keep...)
	if holesBelow, err = s.store.ReadSegments(ctx, pool, p.TopicID, p.Partition, lo, hi, func(r *store.RecordRow) error {
		again = append(again, store.KafkaRecord{Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value,
			Headers: append([]byte(nil), r.Headers...)})
		return nil
	}); err != nil {
		return nil, err
	}
	if store.MissesStored(again, kafkaOffset, from, hi, holesBelow) {
		// The connection closes on the error (its log line is a debug
		// one): this says why.
		err := fmt.Errorf("pgmsg: Kafka fetch of topic %q partition %d from offset %d: read %d records, %d from its segments, "+
			"but the offsets from %d to %d are all stored: nothing was handed over",
			topic, p.Partition, from, len(recs), len(again), max(lo, holesBelow), hi)
		s.logger.Error(err.Error())
		return nil, err
	}
	s.logger.Warn("pgmsg: a Kafka fetch's read missed stored records; read them again from their segments",
		"topic", topic, "partition", p.Partition, "from", from, "last", hi, "read", len(recs), "segments_read", len(again))
	return again, nil
}
