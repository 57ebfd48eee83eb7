package logread

import (
	"maps"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// The record cache: the records a process's groups read of a partition
// are the same records, so a claim of one group does not read again what
// another group of the process read just before. Each partition that at
// least two groups claimed through this Reader within peerWindow keeps
// the latest records read of it, a window of consecutive offsets; a
// claim's records statement skips the part of the claim the window holds
// (store.Held), and the claim takes those records from the window. Gathered
// claims share one read when their groups claim together; the cache
// shares it when they do not (a group that was busy, or a range that
// overlaps another's without being equal).
//
// Records never change once committed; a compacted topic loses some, and
// a record the window still holds after compaction removed it is one a
// claim a moment earlier would have read. A topic deleted and created
// again has a new topic id, which the window is keyed by. Every claim
// gets records of its own (a handler may change what it is given): the
// window keeps copies.

// recordCache is the Reader's windows and their byte budget.
type recordCache struct {
	max int64 // bytes the windows may hold in all; 0: off
	mu  sync.Mutex
	win map[partitionKey]*cacheWindow
	// bytes the windows hold now.
	bytes int64
	// served counts the records claims took from a window.
	served int64
	// swept is when note last freed the windows no group claims anymore.
	swept time.Time
}

// cacheWindow holds the records of offsets first..last of one partition
// (of the topic id topicID) that exist: all of them, but those compaction
// removed. groups is when each group last claimed the partition.
type cacheWindow struct {
	topicID     int32
	first, last int64
	recs        []*pgmsgtype.Record
	bytes       int64
	groups      recentGroups
}

// recentGroups is when each group last claimed a partition through the
// Reader (the gatherer's peers and a cache window's readers).
type recentGroups map[string]time.Time

// note records group's claim at now, forgets the groups that have not
// claimed within peerWindow, and returns how many are left.
func (g recentGroups) note(group string, now time.Time) int {
	g[group] = now
	maps.DeleteFunc(g, func(_ string, t time.Time) bool { return stale(t, now) })
	return len(g)
}

// lately reports whether any group claimed within peerWindow of now.
func (g recentGroups) lately(now time.Time) bool {
	for _, t := range g {
		if !stale(t, now) {
			return true
		}
	}
	return false
}

// stale reports whether a claim at t is too old, at now, to count a
// group as one of a partition's readers.
func stale(t, now time.Time) bool { return now.Sub(t) > peerWindow }

// cacheRecordOverhead is what a cached record costs beyond its key, value
// and headers, for the budget.
const cacheRecordOverhead = 128

func recordBytes(r *pgmsgtype.Record) int64 {
	n := int64(cacheRecordOverhead + len(r.Key) + len(r.Value))
	for k, v := range r.Headers {
		n += int64(len(k) + len(v))
	}
	return n
}

// note registers group's claim of the partition. A window is kept only
// while at least two groups claim the partition: one group's claims
// would only pay for the copies.
func (c *recordCache) note(pk partitionKey, group string) {
	if c.max <= 0 {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.win == nil {
		c.win = map[partitionKey]*cacheWindow{}
	}
	w := c.win[pk]
	if w == nil {
		w = &cacheWindow{first: 1, last: 0, groups: recentGroups{}} // empty
		c.win[pk] = w
	}
	if w.groups.note(group, now) < 2 {
		c.drop(w)
	}
	if now.Sub(c.swept) > peerWindow {
		// The windows of partitions no group claimed lately (their
		// consumers stopped, or moved to another process) are freed.
		c.swept = now
		for k, o := range c.win {
			if !o.groups.lately(now) {
				c.drop(o)
				delete(c.win, k)
			}
		}
	}
}

// held returns what the partition's window holds, for a claim's records
// statement to skip, and its records (a snapshot: later changes to the
// window do not touch it).
func (c *recordCache) held(pk partitionKey) (store.Held, []*pgmsgtype.Record) {
	if c.max <= 0 {
		return store.Held{}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.win[pk]
	if w == nil || w.last < w.first {
		return store.Held{}, nil
	}
	return store.Held{TopicID: w.topicID, First: w.first, Last: w.last}, w.recs[:len(w.recs):len(w.recs)]
}

// forget empties the partition's window.
func (c *recordCache) forget(pk partitionKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.win[pk]; w != nil {
		c.drop(w)
	}
}

// drop empties w (c.mu held).
func (c *recordCache) drop(w *cacheWindow) {
	c.bytes -= w.bytes
	w.recs, w.bytes, w.first, w.last = nil, 0, 1, 0
}

// assemble returns the claim's records: those read (recs, in offset order,
// none of them outside first..last) and those of the part the statement
// skipped (held.Skipped) taken from snap, copied. snap is what held
// described when the claim was made: every record of the skipped part.
func (c *recordCache) assemble(held store.Held, snap []*pgmsgtype.Record, topicID int32, first, last int64,
	recs []*pgmsgtype.Record) []*pgmsgtype.Record {
	lo, hi, skipped := held.Skipped(topicID, first, last)
	if !skipped {
		return recs
	}
	from := searchOffset(snap, lo)
	to := searchOffset(snap, hi+1)
	if from == to {
		return recs // compaction left nothing there
	}
	mine := cloneRecords(snap[from:to])
	c.mu.Lock()
	c.served += int64(len(mine))
	c.mu.Unlock()
	if len(recs) == 0 {
		return mine
	}
	// Merged by offset. A record read as well (a gathered statement read
	// the range of another claim that covered the window) is taken as
	// read.
	out := make([]*pgmsgtype.Record, 0, len(recs)+len(mine))
	i, j := 0, 0
	for i < len(recs) || j < len(mine) {
		switch {
		case j == len(mine) || (i < len(recs) && recs[i].Offset < mine[j].Offset):
			out = append(out, recs[i])
			i++
		case i == len(recs) || mine[j].Offset < recs[i].Offset:
			out = append(out, mine[j])
			j++
		default:
			out = append(out, recs[i])
			i, j = i+1, j+1
		}
	}
	return out
}

// take is a fetched claim's records (row; recs: those its statement
// read, in offset order) completed from the window snapshot snap that
// held described when the claim was made, and offered to the window.
func (c *recordCache) take(pk partitionKey, held store.Held, snap []*pgmsgtype.Record, row *store.ClaimRow,
	recs []*pgmsgtype.Record) []*pgmsgtype.Record {
	recs = c.assemble(held, snap, row.TopicID, row.FirstOffset, row.LastOffset, recs)
	c.offer(pk, row.TopicID, row.FirstOffset, row.LastOffset, recs)
	return recs
}

// offer puts the records of a claim of offsets first..last of topicID
// (all that exist there, in offset order) into the partition's window,
// copied, when they follow on from it; a range past a gap starts the
// window anew. A window keeps at most its share of the budget (the
// budget over the partitions that two groups read; its oldest records go
// first); other partitions' windows are emptied while the whole is over
// it.
func (c *recordCache) offer(pk partitionKey, topicID int32, first, last int64, recs []*pgmsgtype.Record) {
	if c.max <= 0 || last < first {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.win[pk]
	if w == nil || len(w.groups) < 2 {
		return
	}
	switch {
	case w.last < w.first || w.topicID != topicID || first > w.last+1:
		c.drop(w)
		w.topicID, w.first, w.last = topicID, first, first-1
	case last <= w.last:
		return // held already
	}
	from := searchOffset(recs, w.last+1)
	for _, r := range cloneRecords(recs[from:]) {
		w.recs = append(w.recs, r)
		b := recordBytes(r)
		w.bytes += b
		c.bytes += b
	}
	w.last = last
	// The budget: each window that two groups read keeps its share of it
	// (its oldest records go first); other windows are emptied while the
	// whole is still over it.
	active := int64(0)
	for _, o := range c.win {
		if len(o.groups) >= 2 {
			active++
		}
	}
	share := c.max / max(active, 1)
	n := 0
	for n < len(w.recs) && w.bytes > share {
		b := recordBytes(w.recs[n])
		w.bytes -= b
		c.bytes -= b
		w.first = w.recs[n].Offset + 1
		n++
	}
	if n > 0 {
		w.recs = w.recs[n:]
		if w.first > w.last {
			c.drop(w)
		}
	}
	for k, o := range c.win {
		if c.bytes <= c.max {
			break
		}
		if k != pk {
			c.drop(o)
		}
	}
}

// searchOffset is the index of the first of recs (in offset order) at or
// after offset.
func searchOffset(recs []*pgmsgtype.Record, offset int64) int {
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

// CachedRecordsServed is how many records claims took from the record
// cache instead of reading them (for tests and diagnostics).
func (r *Reader) CachedRecordsServed() int64 {
	r.cache.mu.Lock()
	defer r.cache.mu.Unlock()
	return r.cache.served
}
