package logread

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Gathered claims (store.ClaimGather): the direct claims that several
// groups of this Reader's process make of one partition at about the same
// time (a wake-up for the partition reaches every group's consumer at
// once) go out as one statement, and the records they claim cross the
// wire once. The first claim of a partition waits at most GatherWait for
// the other groups that claimed the partition within peerWindow; a claim
// no other group of the process makes goes out at once, alone. Each group
// keeps its own cursor, epoch and lease: what the statement cannot settle
// for a group is made on its own, as before.

// peerWindow is how recently a group must have claimed a partition through
// this Reader for a claim of another group to wait for it.
const peerWindow = time.Second

// gatherKey is what the claims gathered into one statement share: the
// partition, the segment table their records are read from, and whether
// the transaction commits asynchronously.
type gatherKey struct {
	topic     string
	partition int32
	fetch     string
	async     bool
}

// gatherReq is one claim waiting in a batch.
type gatherReq struct {
	params  *store.ClaimParams
	done    chan struct{} // closed when res and settled are set
	res     claimDirectResult
	settled bool
}

// gatherBatch is the claims gathered so far for one key; full is closed
// when as many as the leader waits for have joined.
type gatherBatch struct {
	reqs []*gatherReq
	want int
	full chan struct{}
}

// gatherer holds the open batches and who claimed what recently.
type gatherer struct {
	wait time.Duration // 0: off
	mu   sync.Mutex
	open map[gatherKey]*gatherBatch
	// seen is when each group last made a gatherable claim of a
	// partition, for the number a batch waits for (by partition only:
	// a key's segment changes as the partition grows).
	seen map[partitionKey]recentGroups
	// gathered counts the claims a gathered statement settled.
	gathered atomic.Int64
}

// GatheredClaims is how many claims gathered statements have settled
// (for tests and diagnostics).
func (r *Reader) GatheredClaims() int64 { return r.gather.gathered.Load() }

// claimGathered makes the direct claim params describe together with the
// other groups' claims of the same partition that arrive within the
// gather wait. settled false: nothing was done for params (no other group
// claims the partition, the statement could not settle it, or it failed);
// the caller makes the claim on its own.
func (r *Reader) claimGathered(ctx context.Context, params *store.ClaimParams, fetch string) (claimDirectResult, bool) {
	g := &r.gather
	key := gatherKey{params.Topic, *params.Partition, fetch, params.Async}
	now := time.Now()
	g.mu.Lock()
	pk := partitionKey{params.Topic, *params.Partition}
	peers := g.seen[pk]
	if peers == nil {
		if g.seen == nil {
			g.seen, g.open = map[partitionKey]recentGroups{}, map[gatherKey]*gatherBatch{}
		}
		peers = recentGroups{}
		g.seen[pk] = peers
	}
	want := peers.note(params.Group, now)
	b := g.open[key]
	if b != nil && slices.ContainsFunc(b.reqs, func(q *gatherReq) bool { return q.params.Group == params.Group }) {
		// Two consumers of one group: the batch has its claim already.
		b = nil
	}
	if want < 2 && b == nil {
		g.mu.Unlock()
		return claimDirectResult{}, false
	}
	req := &gatherReq{params: params, done: make(chan struct{})}
	leader := b == nil
	if leader {
		b = &gatherBatch{want: want, full: make(chan struct{})}
		g.open[key] = b
	}
	b.reqs = append(b.reqs, req)
	if len(b.reqs) == b.want {
		close(b.full)
	}
	g.mu.Unlock()
	if !leader {
		// The leader always finishes the batch (its statement runs
		// without the callers' cancellation), so this wait is bounded by
		// one statement.
		<-req.done
		return req.res, req.settled
	}
	t := time.NewTimer(g.wait)
	timedOut := false
	select {
	case <-b.full:
	case <-t.C:
		timedOut = true
	case <-ctx.Done():
		// The batch goes out with what it has: the others ride on it.
	}
	t.Stop()
	g.mu.Lock()
	if g.open[key] == b {
		delete(g.open, key)
	}
	reqs := b.reqs
	if timedOut {
		// The groups that did not come are not waited for again until
		// they claim the partition again: a busy or slower group costs
		// the others one wait per claim of its own, not one per theirs.
		maps.DeleteFunc(g.seen[pk], func(group string, _ time.Time) bool {
			return !slices.ContainsFunc(reqs, func(q *gatherReq) bool { return q.params.Group == group })
		})
	}
	g.mu.Unlock()
	if len(reqs) == 1 {
		return claimDirectResult{}, false
	}
	r.runGather(ctx, key, reqs)
	return req.res, req.settled
}

// runGather runs the gathered claim of reqs and hands each its result.
func (r *Reader) runGather(ctx context.Context, key gatherKey, reqs []*gatherReq) {
	defer func() {
		for _, q := range reqs {
			close(q.done)
		}
	}()
	sreqs := make([]store.ClaimGatherReq, len(reqs))
	lease := time.Duration(0)
	for i, q := range reqs {
		p := q.params
		sreqs[i] = store.ClaimGatherReq{Group: p.Group, Member: p.Member, MaxRecords: p.MaxRecords, Lease: p.Lease,
			Commit: p.Commit, CommitEpoch: p.CommitEpoch}
		if lease == 0 || p.Lease < lease {
			lease = p.Lease
		}
	}
	// Without the caller's cancellation: the other claims ride on this
	// statement. Bounded by the shortest lease, after which a claim it
	// made would be delivered again anyway.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease)
	defer cancel()
	pool, ok := r.primary.(store.BatchSender)
	if !ok {
		return // each claim is made on its own
	}
	pk := partitionKey{key.topic, key.partition}
	held, snap := r.cache.held(pk)
	sink := recordSink{topic: key.topic, partition: key.partition, n: recordBlockMax}
	res, err := r.store.ClaimGather(sctx, pool, key.topic, key.partition, key.fetch, key.async, held, sreqs, sink.add)
	if err != nil {
		// Nothing was done: each claim is made on its own, which reports
		// the error (or clears the segment cache of a dropped table).
		return
	}
	recs := sink.recs
	if !slices.IsSortedFunc(recs, byOffset) {
		slices.SortFunc(recs, byOffset)
	}
	recs = slices.CompactFunc(recs, func(a, b *pgmsgtype.Record) bool { return a.Offset == b.Offset })
	shared := false
	for i, q := range reqs {
		g := res[i]
		if !g.Settled {
			continue
		}
		q.settled = true
		r.gather.gathered.Add(1)
		q.res = claimDirectResult{committed: g.Committed, lsn: g.LSN}
		if g.Row == nil {
			continue
		}
		q.res.row = g.Row
		if !g.Fetched {
			continue
		}
		lo, _ := slices.BinarySearchFunc(recs, g.Row.FirstOffset, func(r *pgmsgtype.Record, o int64) int { return cmp.Compare(r.Offset, o) })
		hi, _ := slices.BinarySearchFunc(recs, g.Row.LastOffset+1, func(r *pgmsgtype.Record, o int64) int { return cmp.Compare(r.Offset, o) })
		mine := recs[lo:hi:hi]
		if shared {
			// Each claim gets records of its own: a handler may change
			// what it is given.
			mine = cloneRecords(mine)
		}
		shared = true
		if mine == nil {
			mine = []*pgmsgtype.Record{}
		}
		q.res.fetched, q.res.records = true, r.cache.take(pk, held, snap, g.Row, mine)
	}
}

func byOffset(a, b *pgmsgtype.Record) int { return cmp.Compare(a.Offset, b.Offset) }

// cloneRecords returns deep copies of recs: the keys, values and headers
// in one allocation (each capped at its length, so that an append to one
// does not write over the next), the Records in another.
func cloneRecords(recs []*pgmsgtype.Record) []*pgmsgtype.Record {
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value)
		for _, v := range r.Headers {
			n += len(v)
		}
	}
	buf := make([]byte, 0, n)
	clone := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		i := len(buf)
		buf = append(buf, b...)
		return buf[i:len(buf):len(buf)]
	}
	out := make([]*pgmsgtype.Record, len(recs))
	block := make([]pgmsgtype.Record, len(recs))
	for i, r := range recs {
		c := &block[i]
		*c = *r
		c.Key, c.Value = clone(r.Key), clone(r.Value)
		if r.Headers != nil {
			c.Headers = make(map[string][]byte, len(r.Headers))
			for k, v := range r.Headers {
				c.Headers[k] = clone(v)
			}
		}
		out[i] = c
	}
	return out
}
