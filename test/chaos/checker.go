package chaos

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
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
	// MaintRuns counts the maintenance leaders' runs.
	MaintRuns int
	// Kinds are the figures of the workflow, sequence and per-key limit
	// jobs (checkKinds).
	Kinds KindStats

	TornLines  int
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

// Check verifies the invariants of the log and the queue over the recorded
// history and the final database state. txGroups are the groups consumed
// with ProcessTx (checked through their effect rows).
func Check(events []Event, db *DBState, txGroups []string) *Report {
	r := &Report{Groups: map[string]*GroupStats{}}
	for _, ev := range events {
		switch {
		case ev.K == "full" && ev.Kind == "pub":
			r.DiskFullPub++
		case ev.K == "full" && ev.Kind == "enq":
			r.DiskFullEnq++
		case ev.K == "maint":
			r.MaintRuns++
		}
	}
	checkLog(r, events, db)
	checkGroups(r, events, db, txGroups)
	checkQueue(r, events, db)
	checkKinds(r, events, db)
	return r
}

func checkLog(r *Report, events []Event, db *DBState) {
	acked := map[string][2]int64{}
	unknown := map[string]bool{}
	for _, ev := range events {
		switch ev.K {
		case "gathered":
			r.GatheredClaims += ev.N
		case "cached":
			r.CachedRecords += ev.N
		case "pub":
			if prev, dup := acked[ev.ID]; dup {
				r.violate("pub-acked-twice", "id %s acknowledged at %v and at %d/%d", ev.ID, prev, ev.P, ev.O)
			}
			acked[ev.ID] = [2]int64{int64(ev.P), ev.O}
		case "puberr", "pubtry":
			for _, id := range ev.IDs {
				unknown[id] = true
			}
		case "pubretried":
			r.PubRetried++
			if ev.Dup {
				r.PubRetriedDup++
			}
		}
	}
	// Attempted (pubtry) or failed (puberr) and never acknowledged: the
	// outcome is unknown to the client; stored or not, both are allowed.
	for id := range acked {
		delete(unknown, id)
	}
	r.Published = len(acked)
	r.PubUnknown = len(unknown)
	// Gapless offsets, and an index of where each id is stored.
	where := map[string][][2]int64{}
	for p, se := range db.Partitions {
		offs := db.Log[p]
		if int64(len(offs)) != se[1]-se[0] {
			r.violate("offset-gap", "partition %d: %d records stored for offsets [%d, %d)", p, len(offs), se[0], se[1])
		}
		for o := se[0]; o < se[1]; o++ {
			id, ok := offs[o]
			if !ok {
				r.violate("offset-gap", "partition %d: offset %d missing below next_offset %d", p, o, se[1])
				continue
			}
			where[id] = append(where[id], [2]int64{int64(p), o})
		}
		for o := range offs {
			if o < se[0] || o >= se[1] {
				r.violate("offset-gap", "partition %d: offset %d stored outside [%d, %d)", p, o, se[0], se[1])
			}
		}
		r.LogRecords += len(offs)
	}
	for id, at := range where {
		if len(at) > 1 {
			r.LogDuplicates++
			r.violate("log-duplicate", "id %s stored %d times: %v", id, len(at), at)
		}
		if _, ok := acked[id]; !ok {
			if unknown[id] {
				r.PubUnknownStored++
			} else {
				r.violate("log-phantom", "id %s stored at %v but never published", id, at[0])
			}
		}
	}
	for id, pos := range acked {
		at := where[id]
		if len(at) == 0 {
			r.Lost++
			r.violate("pub-lost", "id %s acknowledged at partition %d offset %d is not in the log", id, pos[0], pos[1])
			continue
		}
		if at[0] != pos {
			r.violate("pub-misplaced", "id %s acknowledged at %v but stored at %v", id, pos, at[0])
		}
	}
}

type claimKey struct {
	g string
	p int32
	e int64
}

type claimInfo struct {
	member   string
	offs     []int64
	recvT    int64
	commit   *Event // acknowledged commit
	rejected bool   // commit refused: fenced
	unknown  bool   // commit outcome unknown
	released bool
}

// start is the first offset the claim delivered (or committed, when its
// deliveries were not recorded); claims that did neither sort last.
func (c *claimInfo) start() int64 {
	switch {
	case len(c.offs) > 0:
		return c.offs[0]
	case c.commit != nil:
		return c.commit.From
	}
	return math.MaxInt64
}

func checkGroups(r *Report, events []Event, db *DBState, txGroups []string) {
	isTx := map[string]bool{}
	for _, g := range txGroups {
		isTx[g] = true
	}
	claims := map[claimKey]*claimInfo{}
	get := func(k claimKey) *claimInfo {
		c := claims[k]
		if c == nil {
			c = &claimInfo{}
			claims[k] = c
		}
		return c
	}
	stats := func(g string) *GroupStats {
		s := r.Groups[g]
		if s == nil {
			s = &GroupStats{}
			r.Groups[g] = s
		}
		return s
	}
	for g := range db.Cursors {
		stats(g)
	}
	for i := range events {
		ev := &events[i]
		switch ev.K {
		case "recv":
			c := get(claimKey{ev.G, ev.P, ev.E})
			if c.member != "" && c.member != ev.M {
				r.violate("epoch-shared", "group %s partition %d epoch %d delivered to %s and %s", ev.G, ev.P, ev.E, c.member, ev.M)
			}
			c.member = ev.M
			c.offs = append(c.offs, ev.O)
			if c.recvT == 0 || ev.T < c.recvT {
				c.recvT = ev.T
			}
			if id := db.Log[ev.P][ev.O]; id != ev.ID {
				r.violate("recv-mismatch", "group %s got id %s at partition %d offset %d, log holds %q", ev.G, ev.ID, ev.P, ev.O, id)
			}
		case "commit":
			c := get(claimKey{ev.G, ev.P, ev.E})
			if c.commit != nil {
				r.violate("commit-twice", "group %s partition %d epoch %d committed twice", ev.G, ev.P, ev.E)
			}
			c.commit = ev
			stats(ev.G).Commits++
		case "commiterr":
			if ev.Tx {
				stats(ev.G).Unknown++
				continue
			}
			c := get(claimKey{ev.G, ev.P, ev.E})
			if ev.Code == "PM008" || ev.Code == "PM009" {
				c.rejected = true
				stats(ev.G).Rejected++
			} else {
				c.unknown = true
				stats(ev.G).Unknown++
			}
		case "release":
			get(claimKey{ev.G, ev.P, ev.E}).released = true
		case "lost":
			r.SessionsLost++
		}
	}
	byGP := map[gp][]claimKey{}
	for k := range claims {
		byGP[gp{k.g, k.p}] = append(byGP[gp{k.g, k.p}], k)
	}
	for key, ks := range byGP {
		// Claims in the order the database handed them out. Epochs are
		// random, so the order comes from the offsets: a
		// claim starts at the group's cursor, which only moves forward, so
		// start offsets never decrease from one claim to the next. Claims
		// starting at the same offset were each released, expired or
		// fenced before the next was made, except the last one, the only
		// one whose commit can have been accepted; among the others the
		// delivery time decides.
		sort.Slice(ks, func(i, j int) bool {
			a, b := claims[ks[i]], claims[ks[j]]
			if sa, sb := a.start(), b.start(); sa != sb {
				return sa < sb
			}
			if (a.commit != nil) != (b.commit != nil) {
				return b.commit != nil
			}
			if a.recvT != b.recvT {
				return a.recvT < b.recvT
			}
			return ks[i].e < ks[j].e
		})
		s := stats(key.g)
		seen := map[int64]*claimInfo{} // offset -> last claim that delivered it
		committedEnd := int64(-1)      // last offset covered by an acknowledged commit
		var lastCommit *Event
		maxDelivered := int64(-1)
		first := true
		for _, k := range ks {
			c := claims[k]
			if len(c.offs) > 0 {
				start := c.offs[0]
				for i := 1; i < len(c.offs); i++ {
					if c.offs[i] != c.offs[i-1]+1 {
						r.violate("order", "group %s partition %d epoch %d: offsets %d then %d", k.g, k.p, k.e, c.offs[i-1], c.offs[i])
					}
				}
				if start <= committedEnd {
					r.violate("redelivered-committed", "group %s partition %d epoch %d starts at %d, but offsets up to %d were committed (epoch %d)",
						k.g, k.p, k.e, start, committedEnd, lastCommit.E)
				}
				if !first && !isTx[k.g] && start > maxDelivered+1 {
					r.violate("skip", "group %s partition %d epoch %d starts at %d, after %d: offsets skipped", k.g, k.p, k.e, start, maxDelivered)
				}
				if first && start != db.Partitions[k.p][0] && !isTx[k.g] {
					r.violate("skip", "group %s partition %d: first delivery at %d, not %d", k.g, k.p, start, db.Partitions[k.p][0])
				}
				first = false
				for _, o := range c.offs {
					s.Delivered++
					if prev := seen[o]; prev != nil {
						s.Duplicates++
						switch {
						case prev.released:
							s.DupReleased++
						case prev.rejected || prev.unknown:
							s.DupFenced++
						default:
							s.DupDied++
						}
					} else {
						s.Distinct++
					}
					seen[o] = c
					maxDelivered = max(maxDelivered, o)
				}
			}
			// Fencing in time: a later claim must not have been handed out
			// before an accepted commit of an earlier claim was even sent.
			if lastCommit != nil && c.recvT != 0 && c.recvT < lastCommit.Sent {
				r.violate("concurrent-claims", "group %s partition %d: epoch %d delivered to %s at %s, before %s's commit of epoch %d was sent (%s), and that commit was accepted",
					k.g, k.p, k.e, c.member, time.Unix(0, c.recvT).Format("15:04:05.000"), lastCommit.M, lastCommit.E,
					time.Unix(0, lastCommit.Sent).Format("15:04:05.000"))
			}
			if c.commit != nil {
				cm := c.commit
				if len(c.offs) > 0 && (cm.From != c.offs[0] || cm.To != c.offs[len(c.offs)-1]) {
					r.violate("commit-range", "group %s partition %d epoch %d committed [%d,%d] but delivered [%d,%d]",
						k.g, k.p, k.e, cm.From, cm.To, c.offs[0], c.offs[len(c.offs)-1])
				}
				if cm.From <= committedEnd {
					r.violate("overlapping-commits", "group %s partition %d: commit of epoch %d [%d,%d] overlaps commit of epoch %d ending at %d",
						k.g, k.p, k.e, cm.From, cm.To, lastCommit.E, committedEnd)
				}
				committedEnd = max(committedEnd, cm.To)
				lastCommit = cm
			}
		}
	}
	// Completeness: after the drain every group's cursor is at the end and
	// every offset below it was delivered (ProcessTx groups: has exactly
	// one effect row).
	for g, cur := range db.Cursors {
		if g == groupDLQ {
			continue // Consumer.Run records what it handled: checkDeadLetters
		}
		s := stats(g)
		for p, se := range db.Partitions {
			if cur[p] != se[1] {
				r.violate("not-drained", "group %s partition %d: cursor %d, end %d", g, p, cur[p], se[1])
			}
			if isTx[g] {
				eff := db.Effects[g][p]
				for o := se[0]; o < cur[p]; o++ {
					ids := eff[o]
					switch {
					case len(ids) == 0:
						r.violate("effect-missing", "group %s partition %d offset %d below the cursor has no effect", g, p, o)
					case len(ids) > 1:
						s.EffectDups += len(ids) - 1
						r.violate("effect-duplicate", "group %s partition %d offset %d has %d effects", g, p, o, len(ids))
					}
					if len(ids) > 0 && ids[0] != db.Log[p][o] {
						r.violate("effect-mismatch", "group %s partition %d offset %d effect %s, log %s", g, p, o, ids[0], db.Log[p][o])
					}
				}
				continue
			}
			delivered := map[int64]bool{}
			for k, c := range claims {
				if k.g == g && k.p == p {
					for _, o := range c.offs {
						delivered[o] = true
					}
				}
			}
			for o := se[0]; o < cur[p]; o++ {
				if !delivered[o] {
					r.violate("never-delivered", "group %s partition %d offset %d is below the cursor %d but was never delivered", g, p, o, cur[p])
				}
			}
		}
	}
}

func checkQueue(r *Report, events []Event, db *DBState) {
	enq := map[int64]Event{}
	unknownUIDs, tried := 0, 0
	runs := map[int64]int{}
	done := map[int64][]*Event{}
	var runsEv []*Event
	for i := range events {
		ev := &events[i]
		switch ev.K {
		case "enq":
			if _, dup := enq[ev.JID]; dup {
				r.violate("enq-twice", "job %d acknowledged twice", ev.JID)
			}
			enq[ev.JID] = *ev
		case "enqerr":
			unknownUIDs += len(ev.UIDs)
		case "enqtry":
			// An enqueue killed mid-call may have committed jobs nobody
			// acknowledged: allow completions of unknown jobs then.
			tried += len(ev.UIDs)
		case "jrun":
			runs[ev.JID]++
			runsEv = append(runsEv, ev)
		case "jdone":
			done[ev.JID] = append(done[ev.JID], ev)
		case "jdoneerr", "jfailerr":
			if ev.Code == "PM106" {
				r.JobDoneRejected++
			}
		}
	}
	r.Enqueued = len(enq)
	r.EnqUnknown = unknownUIDs
	if tried > len(enq) {
		unknownUIDs = max(unknownUIDs, tried-len(enq))
	}
	for jid, ev := range enq {
		status, archived := db.Archive[jid]
		live, isLive := db.Jobs[jid]
		switch {
		case archived && isLive:
			r.violate("job-twice", "job %d is both archived and live (%s)", jid, live.State)
		case archived:
			if status != "completed" {
				r.violate("job-cancelled", "job %d archived as %s", jid, status)
			}
			r.JobsCompleted++
			if ev.Poison {
				r.violate("poison-completed", "poison job %d was completed", jid)
			}
		case isLive && live.State == "dead":
			r.JobsDead++
			if ev.Poison {
				r.JobsPoisonDead++
			}
			if live.Errors == 0 {
				r.violate("dead-without-errors", "dead job %d has no error history", jid)
			}
		case isLive:
			r.JobsUnfinished++
			r.violate("job-unfinished", "job %d still %s after the drain", jid, live.State)
		default:
			r.JobsLost++
			r.violate("job-lost", "job %d (%s) acknowledged but neither archived nor live", jid, ev.UID)
		}
		if runs[jid] > 1 {
			r.JobRunsDup += runs[jid] - 1
		}
	}
	for jid, evs := range done {
		if len(evs) > 1 {
			r.JobsDoubleDone++
			r.violate("job-completed-twice", "job %d completion acknowledged %d times (tokens %d, %d)", jid, len(evs), evs[0].Tok, evs[1].Tok)
		}
		if db.Archive[jid] != "completed" {
			r.violate("job-done-lost", "job %d completion acknowledged but the job is not archived as completed", jid)
		}
		if _, ok := enq[jid]; !ok && unknownUIDs == 0 {
			r.violate("job-phantom", "job %d completed but never enqueued", jid)
		}
	}
	// Fencing in time: a job claimed again (a later attempt) must not have
	// been handed out before an accepted completion of an earlier claim
	// was sent. Lease tokens are random, so claims are
	// ordered by attempt (the agent never snoozes), not by token.
	type claimKey struct{ jid, tok int64 }
	claimAtt := map[claimKey]int{}
	for _, run := range runsEv {
		claimAtt[claimKey{run.JID, run.Tok}] = run.Att
	}
	for _, run := range runsEv {
		for _, d := range done[run.JID] {
			att, ok := claimAtt[claimKey{d.JID, d.Tok}]
			if ok && run.Tok != d.Tok && run.Att > att && run.T < d.Sent {
				r.violate("job-concurrent", "job %d token %d claimed by %s at %d before token %d's accepted completion was sent at %d",
					run.JID, run.Tok, run.M, run.T, d.Tok, d.Sent)
			}
		}
	}
	for jid, st := range db.Archive {
		if _, ok := enq[jid]; !ok && unknownUIDs == 0 && st == "completed" {
			r.violate("job-phantom", "job %d archived but never enqueued", jid)
		}
	}
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
