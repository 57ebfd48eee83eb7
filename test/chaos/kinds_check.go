package chaos

import (
	"fmt"
	"sort"
)

// The kinds queue holds the enqueuers' workflow, sequence and per-key
// limit jobs (chaosagent -kinds), worked by the kworker agents.
const (
	kindsQueue = "chaos-kinds"
	// kindsKeyLimit is the kinds queue's per-key limit.
	kindsKeyLimit = 2
	// kindsBacklog bounds the kinds queue's waiting jobs (available,
	// scheduled, retrying, pending): above it the enqueuers skip their
	// kinds batches (11 jobs each) until the kworkers have caught up. The
	// two kworkers ran 110-240 jobs a second under faults in the goal run
	// (whose two enqueuers offered 137 a second and left 149,839 pending
	// at the end of the fault phase), so 2,000 is at most 20 s of their
	// work, well within the drain's bound, and still 10 s of work for
	// them at their best: they never starve between two counts (once a
	// second).
	kindsBacklog = 2000
)

// KindJob is a job of the kinds queue at the end of a run, live or
// archived. Times are the database's clock, in Unix nanoseconds (0: none).
type KindJob struct {
	// State is the live job's state, or the archived job's status.
	State       string
	SequenceKey string
	// LimitKey is read from the payload's "lk" (the archive keeps no
	// limit key; the enqueuer writes it there too).
	LimitKey  string
	DependsOn []int64
	// AttemptedAt is the last attempt's start; FinishedAt when the job
	// was archived or went dead.
	AttemptedAt, FinishedAt int64
}

// KindStats are the figures of the kinds queue's checks.
type KindStats struct {
	Enqueued      int // jobs acknowledged (kenq)
	Workflow      int // jobs with dependencies, in the database
	Sequence      int // jobs with a sequence key
	Limited       int // jobs with a limit key
	Starts        int // claims the kworkers recorded with their attempted_at (krun)
	DepsChecked   int // (start, dependency) pairs compared
	SeqPairs      int // consecutive pairs of a sequence compared
	MaxPerKey     int // most jobs of one limit key seen running at once
	Cancelled     int // dependents cancelled because a dependency went dead
	SequenceKeys  int
	LimitKeysSeen int
	// Skipped counts the enqueuers' kinds batches skipped while the
	// backlog was above kindsBacklog (kskip).
	Skipped int
}

// checkDependencies: a dependent never starts before all its
// dependencies completed. Every recorded start of a job with
// dependencies must come after each dependency's finish (the database's
// clock: the claim reads clock_timestamp() after the completion committed),
// and a job whose dependency did not complete (dead, cancelled) must not
// have run at all.
func checkDependencies(r *Report, jobs map[int64]KindJob, starts map[int64][]int64) {
	st := &r.Kinds
	for id, j := range jobs {
		if len(j.DependsOn) == 0 {
			continue
		}
		st.Workflow++
		if j.State == "cancelled" {
			st.Cancelled++
		}
		for _, s := range starts[id] {
			for _, d := range j.DependsOn {
				dj, ok := jobs[d]
				if !ok {
					continue // not a kinds job (or pruned): nothing to compare with
				}
				st.DepsChecked++
				switch {
				case dj.State != "completed":
					r.violate("dep-not-completed", "job %d started at %d though its dependency %d ended %s", id, s, d, dj.State)
				case s <= dj.FinishedAt:
					r.violate("dep-early", "job %d started at %d, before its dependency %d completed at %d", id, s, d, dj.FinishedAt)
				}
			}
		}
	}
}

// checkSequences: a sequence never runs two jobs at once, nor out of
// enqueue (id) order. For each two consecutive jobs of a sequence, every
// start of the later one must come after the earlier one finished (the
// database's clock); a later job that ran while the earlier never
// finished breaks it too.
func checkSequences(r *Report, jobs map[int64]KindJob, starts map[int64][]int64) {
	st := &r.Kinds
	bySeq := map[string][]int64{}
	for id, j := range jobs {
		if j.SequenceKey != "" {
			bySeq[j.SequenceKey] = append(bySeq[j.SequenceKey], id)
			st.Sequence++
		}
	}
	st.SequenceKeys = len(bySeq)
	for key, ids := range bySeq {
		sort.Slice(ids, func(i, k int) bool { return ids[i] < ids[k] })
		for i := 1; i < len(ids); i++ {
			prev, cur := jobs[ids[i-1]], ids[i]
			st.SeqPairs++
			for _, s := range starts[cur] {
				switch {
				case prev.FinishedAt == 0:
					r.violate("sequence-overlap", "sequence %s: job %d started at %d while job %d before it never finished (%s)",
						key, cur, s, ids[i-1], prev.State)
				case s <= prev.FinishedAt:
					r.violate("sequence-overlap", "sequence %s: job %d started at %d, before job %d before it finished at %d",
						key, cur, s, ids[i-1], prev.FinishedAt)
				}
			}
		}
	}
}

// checkKeyLimits: at no instant do more than limit jobs of one limit key
// run. Each job that ran holds its key's place from its first start to
// its finish (the database's clock; a job admitted holds it through its
// retries), so the most such intervals of a key overlapping at once is
// at most limit. A start missing from the history only shortens an
// interval: it can hide a violation, never invent one.
func checkKeyLimits(r *Report, jobs map[int64]KindJob, starts map[int64][]int64, limit int) {
	st := &r.Kinds
	type edge struct {
		t     int64
		delta int
		id    int64
	}
	byKey := map[string][]edge{}
	for id, j := range jobs {
		if j.LimitKey == "" {
			continue
		}
		st.Limited++
		s := starts[id]
		if len(s) == 0 {
			continue
		}
		end := j.FinishedAt
		if end == 0 {
			end = 1<<63 - 1 // still running at the end
		}
		byKey[j.LimitKey] = append(byKey[j.LimitKey], edge{s[0], 1, id}, edge{end, -1, id})
	}
	st.LimitKeysSeen = len(byKey)
	for key, es := range byKey {
		// A job admitted when another left starts after that one's
		// finish: at one instant, ends come before starts.
		sort.Slice(es, func(i, k int) bool {
			if es[i].t != es[k].t {
				return es[i].t < es[k].t
			}
			return es[i].delta < es[k].delta
		})
		n := 0
		for _, e := range es {
			n += e.delta
			st.MaxPerKey = max(st.MaxPerKey, n)
			if e.delta > 0 && limit > 0 && n > limit {
				r.violate("key-limit-exceeded", "limit key %s: %d jobs running at %d (job %d started), limit %d", key, n, e.t, e.id, limit)
			}
		}
	}
}

// kindsSummary is the kinds queue's line of the report.
func (r *Report) kindsSummary() string {
	s := r.Kinds
	return fmt.Sprintf("kinds: %d jobs acknowledged; %d with dependencies (%d cancelled by a failed dependency, %d start/dependency pairs checked), "+
		"%d in %d sequences (%d consecutive pairs checked), %d with %d limit keys (at most %d running at once, limit %d); %d claims recorded with their attempted_at\n",
		s.Enqueued, s.Workflow, s.Cancelled, s.DepsChecked, s.Sequence, s.SequenceKeys, s.SeqPairs, s.Limited, s.LimitKeysSeen, s.MaxPerKey, kindsKeyLimit, s.Starts) +
		fmt.Sprintf("kinds: %d batches of 11 jobs skipped by the enqueuers while more than %d jobs waited in the queue\n", s.Skipped, kindsBacklog)
}
