package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// DBState is what the database holds at the end of a run (read after every
// agent stopped), against which the histories are checked.
type DBState struct {
	// Partitions of the topic: start_offset and next_offset.
	Partitions map[int32][2]int64
	// CopyPartitions counts the partitions that published with COPY
	// (they have an offset sequence).
	CopyPartitions int
	// Log holds every stored record's id by partition and offset.
	Log map[int32]map[int64]string
	// Cursors holds each group's next_offset by partition.
	Cursors map[string]map[int32]int64
	// Effects holds, for each group consumed with ProcessTx, the effect rows
	// written per (partition, offset): the ids, one per row.
	Effects map[string]map[int32]map[int64][]string
	// Jobs are the live jobs (waiting, running, dead); Archive the archived.
	Jobs    map[int64]JobRow
	Archive map[int64]string // status
	// DeadLetters holds the records of the dead-letter topic: the ids they
	// hold by source partition and offset.
	DeadLetters map[int32]map[int64][]string
	// KindJobs are the kinds queue's jobs, live and archived, and
	// KindsKeyLimit its per-key limit.
	KindJobs      map[int64]KindJob
	KindsKeyLimit int
}

// JobRow is a live job at the end of a run.
type JobRow struct {
	State   string
	Attempt int
	Errors  int
}

// GroupStats are the figures of one consumer group.
type GroupStats struct {
	Delivered   int // records delivered (all deliveries)
	Distinct    int // distinct offsets delivered
	Duplicates  int // deliveries beyond the first
	DupReleased int // ... of records whose earlier claim was released on purpose
	DupFenced   int // ... whose earlier claim's commit was rejected (PM008/PM009) or lost
	DupDied     int // ... whose earlier claim's member died or stalled before committing
	Commits     int // commits the database acknowledged
	Rejected    int // commits refused with PM008/PM009 (fencing worked)
	Unknown     int // commits whose outcome the client never learnt
	EffectDups  int // ProcessTx groups: effect rows beyond one per offset
}

// Report is the checker's verdict and figures.
type Report struct {
	Published        int // publishes acknowledged (records)
	PubUnknown       int // records of failed or unknown publishes
	PubUnknownStored int // ... that were nevertheless committed
	LogRecords       int
	Lost             int // acknowledged records missing from the log
	LogDuplicates    int // ids stored more than once
	PubRetried       int // idempotent batches acknowledged after a retry
	PubRetriedDup    int // ... whose first attempt had been stored (answered as duplicates)
	Groups           map[string]*GroupStats
	// GatheredClaims are the consumer agents' claims that went out
	// gathered with another group's (g-run with g-run2).
	GatheredClaims int
	// CachedRecords are the records the consumer agents' claims took
	// from their record cache instead of reading them.
	CachedRecords int

	Enqueued        int // enqueues acknowledged
	EnqUnknown      int
	JobsCompleted   int
	JobsDead        int
	JobsPoisonDead  int
	JobsLost        int
	JobsUnfinished  int
	JobsDoubleDone  int // completions acknowledged twice for one job
	JobRunsDup      int // attempts beyond one per finished job (retries included)
	JobDoneRejected int // completions refused with PM106 (fencing worked)

	// SessionsLost counts members told their partitions were lost (their
	// session expired while paused or cut off; their claims are fenced).
	SessionsLost int

	// SoakDelivered and SoakCommits are the g-run figures of a soak, whose
	// check does not track single offsets.
	SoakDelivered, SoakCommits int

	// DeadLettered are the records set aside by the MaxDeliveries group,
	// DeadLetterHandled the other records its handler took.
	DeadLettered, DeadLetterHandled int

	// DiskFullPub and DiskFullEnq count the publish and enqueue attempts
	// refused with PM021 (the volume was full; the agents retried them).
	DiskFullPub, DiskFullEnq int
	// NotEnoughReplicas counts, per event kind (puberr, enqerr,
	// commiterr, ...), the calls refused with PM124: min_insync_replicas 2
	// (the failover runs) while the primary had no synchronous standby.
	NotEnoughReplicas map[string]int
	// MaintRuns counts the maintenance leaders' runs.
	MaintRuns int
	// Kinds are the figures of the workflow, sequence and per-key limit
	// jobs (checkKinds).
	Kinds KindStats

	TornLines int
	// Units are the units the checker loaded one at a time (stream.go).
	Units      []UnitStat
	Violations []string
	counts     map[string]int
}

func (r *Report) violate(kind, format string, args ...any) {
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[kind]++
	if r.counts[kind] <= 10 {
		r.Violations = append(r.Violations, kind+": "+fmt.Sprintf(format, args...))
	} else if r.counts[kind] == 11 {
		r.Violations = append(r.Violations, kind+": ... (more)")
	}
}

// ViolationCounts returns the number of violations by kind.
func (r *Report) ViolationCounts() map[string]int { return r.counts }

// OK reports whether no invariant was violated.
func (r *Report) OK() bool { return len(r.counts) == 0 }

type gp struct {
	g string
	p int32
}

// Summary renders the report as text.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "log: %d publishes acknowledged, %d unknown/failed (%d of them stored), %d records stored, lost %d, duplicated %d\n",
		r.Published, r.PubUnknown, r.PubUnknownStored, r.LogRecords, r.Lost, r.LogDuplicates)
	fmt.Fprintf(&b, "log: %d idempotent batches acknowledged after retries, %d of them stored by an earlier attempt (answered as duplicates, stored once)\n",
		r.PubRetried, r.PubRetriedDup)
	groups := make([]string, 0, len(r.Groups))
	for g := range r.Groups {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		s := r.Groups[g]
		if g == groupDLQ {
			fmt.Fprintf(&b, "group %s (Run, MaxDeliveries 3): %d poison records set aside once each, %d other records handled, none set aside\n",
				g, r.DeadLettered, r.DeadLetterHandled)
			continue
		}
		fmt.Fprintf(&b, "group %s: %d delivered (%d distinct), %d duplicates (released %d, fenced/failed commit %d, member died/paused %d), "+
			"commits %d accepted, %d fenced (PM008/PM009), %d unknown; effect duplicates %d\n",
			g, s.Delivered, s.Distinct, s.Duplicates, s.DupReleased, s.DupFenced, s.DupDied, s.Commits, s.Rejected, s.Unknown, s.EffectDups)
	}
	fmt.Fprintf(&b, "queue: %d enqueues acknowledged (%d unknown), %d completed, %d dead (%d poison), lost %d, unfinished %d, completed twice %d, extra attempts %d, stale completions refused %d\n",
		r.Enqueued, r.EnqUnknown, r.JobsCompleted, r.JobsDead, r.JobsPoisonDead, r.JobsLost, r.JobsUnfinished, r.JobsDoubleDone, r.JobRunsDup, r.JobDoneRejected)
	if r.Kinds.Enqueued > 0 {
		b.WriteString(r.kindsSummary())
	}
	if r.SoakCommits > 0 {
		fmt.Fprintf(&b, "group g-run: %d records delivered in %d accepted commits; every cursor at the end\n", r.SoakDelivered, r.SoakCommits)
	}
	if r.GatheredClaims > 0 {
		fmt.Fprintf(&b, "gathered claims: %d of the consumer agents' claims went out with another group's\n", r.GatheredClaims)
	}
	if r.CachedRecords > 0 {
		fmt.Fprintf(&b, "record cache: %d records the consumer agents' claims took from it (checked as every delivery is)\n", r.CachedRecords)
	}
	if len(r.NotEnoughReplicas) > 0 {
		kinds := make([]string, 0, len(r.NotEnoughReplicas))
		for k := range r.NotEnoughReplicas {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.NotEnoughReplicas[k]))
		}
		fmt.Fprintf(&b, "not enough replicas (PM124, min_insync_replicas 2 without a synchronous standby; nothing stored): %s\n", strings.Join(parts, ", "))
	}
	if r.DiskFullPub+r.DiskFullEnq > 0 {
		fmt.Fprintf(&b, "disk full: %d publish and %d enqueue attempts refused with PM021 (nothing stored; retried)\n", r.DiskFullPub, r.DiskFullEnq)
	}
	if r.MaintRuns > 0 {
		fmt.Fprintf(&b, "maintenance: %d runs by the leader\n", r.MaintRuns)
	}
	fmt.Fprintf(&b, "membership: %d partition losses reported to members (session expired)\n", r.SessionsLost)
	if r.TornLines > 0 {
		fmt.Fprintf(&b, "history: %d torn lines skipped\n", r.TornLines)
	}
	if r.OK() {
		b.WriteString("invariants: all hold\n")
	} else {
		fmt.Fprintf(&b, "invariants VIOLATED: %v\n", r.counts)
		for _, v := range r.Violations {
			b.WriteString("  " + v + "\n")
		}
	}
	return b.String()
}
