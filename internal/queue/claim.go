package queue

import (
	"context"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// The claims on the client's pool go through a static statement against
// the tables (store.JobClaimDirect) when they can, and through job_claim()
// when it has to answer: the first claim of a queue, an unknown queue, a
// byte cap, a queue with a rate limit or a running cap. What the client
// remembers of its claims to steer them, the claim position above all, is
// kept here.

// ClaimOpts are a claim's options (pgmsg.ClaimJobsOpts, defaults not yet
// applied).
type ClaimOpts struct {
	// Max is the most jobs to claim; 0: ClaimMaxDefault.
	Max int
	// Lease overrides the queue's lease; 0: the queue's.
	Lease time.Duration
	// Worker names the claimant.
	Worker string
	// MaxBytes caps the payload bytes of the claim (at least one job);
	// 0: no cap.
	MaxBytes int64
}

// claimFullEvery is how often a client's direct claims read the whole
// job_claim index (a claim without a position) and probe for expired
// leases, as job_claim() does at most once a second per session. The
// direct statement does both, so that no claim waits for job_claim():
// called once a second from a pool, it ran on a connection that had not
// run it lately and took 19 ms (the function's compilation and first
// plans) against 1 ms for the statement, which set the p99 latency at
// 1,000 jobs/s.
const claimFullEvery = time.Second

// claimFairLag is how far behind a fair queue's reads start: at the
// largest tag claimed claimFairLag to twice that ago. A job is tagged at
// the queue's virtual time when its enqueue starts, and the claims go on
// while it runs: a read from the latest tag would miss the jobs of
// enqueues that took longer than the claims since (a straggler, below
// every read's start). The cost is the claimed entries crossed: the
// queue's claims over the lag.
const claimFairLag = 100 * time.Millisecond

// claimFairDeepLag and claimFairDeepEvery: a straggler of an enqueue that
// took longer than claimFairLag (its commit held up on a loaded server)
// is found by a deep read, from the largest tag claimed claimFairDeepLag
// to twice that ago, which one direct claim in claimFairDeepEvery makes,
// instead of waiting for the read of the whole index each claimFullEvery
// (which crosses every entry claimed since the last vacuum). A deep read
// crosses the queue's claims over its lag.
const (
	claimFairDeepLag   = time.Second
	claimFairDeepEvery = 100 * time.Millisecond
)

// claimLimitedFor is how long a client sends the claims of a queue found
// to have a rate limit or running cap straight to job_claim(), before
// trying the direct statement again (the limits may have been removed).
const claimLimitedFor = 10 * time.Second

// claimState is what a client remembers of its claims from one queue:
// the claim position (the last job handed out, in claim order), when its
// claims last read the whole index and probed for expired leases, and
// whether the last probe found an expired lease to rescue.
type claimState struct {
	mu       sync.Mutex
	valid    bool
	priority int16
	runAt    time.Time
	id       int64
	// fairValid and fairTag: the largest virtual start tag of the last
	// direct claim of a fair queue. fair is what it was at the last step
	// of claimFairLag (fair.at) and the step before, where the reads
	// start; deep the same in steps of claimFairDeepLag, where a read
	// starts once per claimFairDeepEvery (deepRead). See claimFairLag.
	fairValid bool
	fairTag   float64
	fair      lagged
	deep      lagged
	deepRead  time.Time
	full      time.Time // last claim without a position
	probed    time.Time // last probe for expired leases
	rescue    bool      // the last probe found an expired lease
	limited   time.Time // when the queue was last found limited
	// limitChecked is when checkLimited last read the queue's limits.
	limitChecked time.Time
}

// Claim leases up to o.Max claimable jobs of queue on exec, in one
// statement. async (only for a claim that is its own transaction) lets
// the claim commit without waiting for its WAL flush: a claim lost in a
// crash is claimed again, which at-least-once allows. It returns no jobs
// (an empty slice) when none is claimable.
func (q *Queues) Claim(ctx context.Context, exec store.DBTX, queue string, o ClaimOpts, async bool) ([]*pgmsgtype.Job, error) {
	if o.Max == 0 {
		o.Max = ClaimMaxDefault
	}
	// job_claim() refuses a max under 1, a lease that is not positive (one
	// under 1µs is sent as 0) or over 366 days and a max bytes under 1
	// (PM004), before it looks the queue up. The direct statement covers
	// claims on the client's pool without a byte cap (the worker's), and a
	// max and lease job_claim() accepts (it does not check them);
	// job_claim() answers the rest.
	direct := exec == store.DBTX(q.pool) && o.MaxBytes == 0 && o.Max >= 1 &&
		(o.Lease == 0 || (o.Lease.Microseconds() > 0 && o.Lease <= q.cfg.DurationMax))
	now := time.Now()
	if direct {
		jobs, ok, err := q.claimDirect(ctx, queue, &o, async)
		if err != nil {
			return nil, err
		}
		if ok {
			return jobs, nil
		}
	}
	var out []*pgmsgtype.Job
	err := q.store.JobClaim(ctx, exec, store.JobClaimParams{Queue: queue, Max: o.Max, Lease: o.Lease, Worker: o.Worker,
		MaxBytes: o.MaxBytes, Async: async}, func(i, n int, j *pgmsgtype.Job) error {
		if out == nil {
			out = make([]*pgmsgtype.Job, n)
		}
		out[i] = j
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []*pgmsgtype.Job{}
	}
	if direct {
		st := q.claimState(queue, true)
		st.claimed(out, true, now)
		if len(out) < o.Max {
			q.checkLimited(ctx, queue, st, now)
		}
	}
	return out, nil
}

// checkLimited learns, at most once per claimLimitedFor, whether a queue
// whose job_claim() call returned fewer jobs than asked is limited: the
// direct statement says so itself, but a queue's first claims go through
// job_claim(), and a Worker needs to know (it claims again when a handler
// frees a slot of a limited queue; see fetch in internal/worker).
func (q *Queues) checkLimited(ctx context.Context, queue string, st *claimState, now time.Time) {
	st.mu.Lock()
	fresh := now.Sub(st.limitChecked) < claimLimitedFor || now.Sub(st.limited) < claimLimitedFor
	if !fresh {
		st.limitChecked = now
	}
	st.mu.Unlock()
	if fresh {
		return
	}
	if limited, err := q.store.QueueLimited(ctx, q.pool, queue); err != nil || !limited {
		return
	}
	st.mu.Lock()
	st.limited = now
	st.mu.Unlock()
}

// Limited reports whether the client's last direct claim of queue found
// it limited (a rate limit or running cap), within claimLimitedFor.
func (q *Queues) Limited(queue string) bool {
	st := q.claimState(queue, false)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return !st.limited.IsZero() && time.Since(st.limited) < claimLimitedFor
}

// claimState returns the state of queue, creating it if create is set.
// Only a claim through job_claim() creates one, so the map holds queues
// that existed when claimed from, not every name a caller tried (the HTTP
// API passes callers' queue names through).
func (q *Queues) claimState(queue string, create bool) *claimState {
	if v, ok := q.claims.Load(queue); ok {
		return v.(*claimState)
	}
	if !create {
		return nil
	}
	v, _ := q.claims.LoadOrStore(queue, &claimState{})
	return v.(*claimState)
}

// next returns what the next direct claim sends: the claim position
// (none when the whole index is due), whether it probes for expired
// leases, and whether expired leases are to be rescued first.
func (s *claimState) next(now time.Time) (pos store.JobClaimPosition, probe, rescue bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rescue = s.rescue
	if now.Sub(s.full) >= claimFullEvery {
		s.full = now
	} else {
		if s.valid {
			pos = store.JobClaimPosition{Valid: true, Priority: s.priority, RunAt: s.runAt, ID: s.id}
		}
		s.fair.step(now, claimFairLag, s.fairValid, s.fairTag)
		s.deep.step(now, claimFairDeepLag, s.fairValid, s.fairTag)
		pos.FairValid, pos.FairTag = s.fair.oldValid, s.fair.old
		if now.Sub(s.deepRead) >= claimFairDeepEvery {
			s.deepRead = now
			switch {
			case !s.deep.oldValid:
				// No position a deep step old yet (the client's first
				// seconds of this queue): the deep read reads the whole
				// index, which has crossed little since.
				pos.FairValid = false
			case pos.FairValid && s.deep.old < pos.FairTag:
				pos.FairTag = s.deep.old
			}
		}
	}
	if now.Sub(s.probed) >= claimFullEvery {
		s.probed, probe = now, true
	}
	return pos, probe, rescue
}

// lagged is a claim position (the largest fair tag claimed) as it was at
// least one step ago: at each step the position of the step before
// becomes old, and the current one mid. Between steps, old is the
// position of one to two steps ago. A queue's tags only grow as it is
// claimed, so an older position is a lower (never a later) start.
type lagged struct {
	at                 time.Time
	midValid, oldValid bool
	mid, old           float64
}

// step moves l on at now when a step (every) has passed since the last,
// with the current position (valid, tag).
func (l *lagged) step(now time.Time, every time.Duration, valid bool, tag float64) {
	if now.Sub(l.at) < every {
		return
	}
	l.oldValid, l.old = l.midValid, l.mid
	l.midValid, l.mid, l.at = valid, tag, now
}

// claimed records a claim: its last job is the new position; fn says it
// went through job_claim() at now, which read the whole index and probed
// for expired leases (unless its session had this second).
func (s *claimState) claimed(jobs []*pgmsgtype.Job, fn bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fn {
		s.full, s.probed = now, now
	}
	if len(jobs) > 0 {
		last := jobs[len(jobs)-1]
		if last.RunAt != nil {
			s.valid, s.priority, s.runAt, s.id = true, int16(last.Priority), *last.RunAt, last.ID
		}
	}
}

// claimDirect claims through the direct statement (store.JobClaimDirect)
// on the pool; ok false means job_claim() must answer (the queue is
// unknown, or the direct statement may not claim now).
func (q *Queues) claimDirect(ctx context.Context, queue string, o *ClaimOpts, async bool) (jobs []*pgmsgtype.Job, ok bool, err error) {
	st := q.claimState(queue, false)
	if st == nil {
		return nil, false, nil
	}
	st.mu.Lock()
	limited := time.Since(st.limited) < claimLimitedFor
	st.mu.Unlock()
	if limited {
		return nil, false, nil
	}
	pos, probe, rescue := st.next(time.Now())
	if rescue {
		// The last probe found an expired lease: job_rescue() makes its
		// job claimable again (job_claim()'s own probe is throttled per
		// session, and a pool spreads calls over sessions).
		if _, err := q.store.JobRescue(ctx, q.pool, queue, 1000); err != nil {
			return nil, false, err
		}
		st.mu.Lock()
		st.rescue = false
		st.mu.Unlock()
	}
	res, err := q.store.JobClaimDirect(ctx, q.pool, store.JobClaimDirectParams{Queue: queue, Max: o.Max, Lease: o.Lease,
		Worker: o.Worker, Position: pos, Async: async, Probe: probe}, func(j *pgmsgtype.Job) error {
		jobs = append(jobs, j)
		return nil
	})
	if res.Expired {
		// The jobs of this claim are handed out; the next claim rescues
		// the lease first.
		st.mu.Lock()
		st.rescue = true
		st.mu.Unlock()
	}
	switch {
	case err != nil:
		return nil, false, err
	case res.Limited:
		// Nothing was claimed: job_claim() applies the limits.
		st.mu.Lock()
		st.limited = time.Now()
		st.mu.Unlock()
		return nil, false, nil
	case res.Unknown:
		// Unknown queue (deleted meanwhile): job_claim() raises the
		// error, and the state goes.
		q.claims.Delete(queue)
		return nil, false, nil
	}
	st.claimed(jobs, false, time.Time{})
	if res.FairValid {
		st.mu.Lock()
		st.fairValid, st.fairTag = true, res.FairTag
		st.mu.Unlock()
	}
	return jobs, true, nil
}
