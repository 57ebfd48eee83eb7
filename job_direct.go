package pgmsg

import (
	"context"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/store"
)

// The worker's claims go through a static statement against the tables
// (store.JobClaimDirect) when they can, and through job_claim() when it
// has to answer: the first claim of a queue, an unknown queue, a byte cap,
// a queue with a rate limit or a running cap. What the client remembers of
// its claims to steer them, the claim position above all, is kept here.

// jobClaimFullEvery is how often a client's direct claims read the whole
// job_claim index (a claim without a position) and probe for expired
// leases, as job_claim() does at most once a second per session. The
// direct statement does both, so that no claim waits for job_claim():
// called once a second from a pool, it ran on a connection that had not
// run it lately and took 19 ms (the function's compilation and first
// plans) against 1 ms for the statement, which set the p99 latency at
// 1,000 jobs/s.
const jobClaimFullEvery = time.Second

// jobClaimState is what a Client remembers of its claims from one queue:
// the claim position (the last job handed out, in claim order), when its
// claims last read the whole index and probed for expired leases, and
// whether the last probe found an expired lease to rescue.
type jobClaimState struct {
	mu       sync.Mutex
	valid    bool
	priority int16
	runAt    time.Time
	id       int64
	full     time.Time // last claim without a position
	probed   time.Time // last probe for expired leases
	rescue   bool      // the last probe found an expired lease
	limited  time.Time // when the queue was last found limited
	// limitChecked is when checkLimited last read the queue's limits.
	limitChecked time.Time
}

// queueLimited reports whether the client's last direct claim of queue
// found it limited (a rate limit or running cap), within
// jobClaimLimitedFor.
func (c *Client) queueLimited(queue string) bool {
	st := c.jobClaimState(queue, false)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return !st.limited.IsZero() && time.Since(st.limited) < jobClaimLimitedFor
}

// jobClaimLimitedFor is how long a client sends the claims of a queue
// found to have a rate limit or running cap straight to job_claim(), before
// trying the direct statement again (the limits may have been removed).
const jobClaimLimitedFor = 10 * time.Second

// jobClaimState returns the state of queue, creating it if create is set.
// Only a claim through job_claim() creates one, so the map holds queues
// that existed when claimed from, not every name a caller tried (the HTTP
// API passes callers' queue names through).
func (c *Client) jobClaimState(queue string, create bool) *jobClaimState {
	if v, ok := c.jobClaims.Load(queue); ok {
		return v.(*jobClaimState)
	}
	if !create {
		return nil
	}
	v, _ := c.jobClaims.LoadOrStore(queue, &jobClaimState{})
	return v.(*jobClaimState)
}

// next returns what the next direct claim sends: the claim position
// (none when the whole index is due), whether it probes for expired
// leases, and whether expired leases are to be rescued first.
func (s *jobClaimState) next(now time.Time) (pos store.JobClaimPosition, probe, rescue bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rescue = s.rescue
	if now.Sub(s.full) >= jobClaimFullEvery {
		s.full = now
	} else if s.valid {
		pos = store.JobClaimPosition{Valid: true, Priority: s.priority, RunAt: s.runAt, ID: s.id}
	}
	if now.Sub(s.probed) >= jobClaimFullEvery {
		s.probed, probe = now, true
	}
	return pos, probe, rescue
}

// claimed records a claim: its last job is the new position; fn says it
// went through job_claim() at now, which read the whole index and probed
// for expired leases (unless its session had this second).
func (s *jobClaimState) claimed(jobs []*Job, fn bool, now time.Time) {
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

// claimJobsDirect claims through the direct statement
// (store.JobClaimDirect) on the pool; ok false means job_claim() must
// answer (the queue is unknown, or the direct statement may not claim now).
func (c *Client) claimJobsDirect(ctx context.Context, queue string, o *ClaimJobsOpts, async bool) (jobs []*Job, ok bool, err error) {
	st := c.jobClaimState(queue, false)
	if st == nil {
		return nil, false, nil
	}
	st.mu.Lock()
	limited := time.Since(st.limited) < jobClaimLimitedFor
	st.mu.Unlock()
	if limited {
		return nil, false, nil
	}
	pos, probe, rescue := st.next(time.Now())
	if rescue {
		// The last probe found an expired lease: job_rescue() makes its
		// job claimable again (job_claim()'s own probe is throttled per
		// session, and a pool spreads calls over sessions).
		if _, err := c.store.JobRescue(ctx, c.pool, queue, 1000); err != nil {
			return nil, false, err
		}
		st.mu.Lock()
		st.rescue = false
		st.mu.Unlock()
	}
	res, err := c.store.JobClaimDirect(ctx, c.pool, store.JobClaimDirectParams{Queue: queue, Max: o.Max, Lease: o.Lease,
		Worker: o.Worker, Position: pos, Async: async, Probe: probe}, func(j *Job) error {
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
		c.jobClaims.Delete(queue)
		return nil, false, nil
	}
	st.claimed(jobs, false, time.Time{})
	return jobs, true, nil
}
