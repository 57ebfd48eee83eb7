package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A small consistent history: two records on partition 0, group g read
// them in one claim and committed; one job enqueued and completed.
func goodHistory() ([]Event, *DBState) {
	ev := []Event{
		{K: "pub", T: 1, ID: "a", P: 0, O: 0},
		{K: "pub", T: 2, ID: "b", P: 0, O: 1},
		{K: "recv", T: 3, G: "g", M: "m1", P: 0, O: 0, E: 1, ID: "a"},
		{K: "recv", T: 3, G: "g", M: "m1", P: 0, O: 1, E: 1, ID: "b"},
		{K: "commit", T: 5, G: "g", M: "m1", P: 0, E: 1, From: 0, To: 1, Sent: 4},
		{K: "enq", T: 1, JID: 7, UID: "j"},
		{K: "jrun", T: 2, JID: 7, Tok: 1, Att: 1, M: "w"},
		{K: "jdone", T: 4, JID: 7, Tok: 1, M: "w", Sent: 3},
	}
	db := &DBState{
		Partitions: map[int32][2]int64{0: {0, 2}},
		Log:        map[int32]map[int64]string{0: {0: "a", 1: "b"}},
		Cursors:    map[string]map[int32]int64{"g": {0: 2}},
		Effects:    map[string]map[int32]map[int64][]string{},
		Jobs:       map[int64]JobRow{},
		Archive:    map[int64]string{7: "completed"},
	}
	return ev, db
}

func TestCheckerAcceptsConsistentHistory(t *testing.T) {
	ev, db := goodHistory()
	if r := Check(ev, db, nil); !r.OK() {
		t.Fatalf("violations on a consistent history:\n%s", r.Summary())
	}
}

// Each case breaks one invariant; the checker must name it.
func TestCheckerCatchesViolations(t *testing.T) {
	cases := []struct {
		name   string
		want   string
		break_ func(ev []Event, db *DBState) []Event
	}{
		{"acknowledged publish lost", "pub-lost", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "pub", T: 9, ID: "c", P: 0, O: 2})
		}},
		{"offset gap", "offset-gap", func(ev []Event, db *DBState) []Event {
			db.Partitions[0] = [2]int64{0, 3}
			return ev
		}},
		{"record stored twice", "log-duplicate", func(ev []Event, db *DBState) []Event {
			db.Log[0][2] = "a"
			db.Partitions[0] = [2]int64{0, 3}
			db.Cursors["g"][0] = 3
			return append(ev, Event{K: "recv", T: 6, G: "g", M: "m1", P: 0, O: 2, E: 2, ID: "a"})
		}},
		{"record never published", "log-phantom", func(ev []Event, db *DBState) []Event {
			db.Log[0][2] = "zzz"
			db.Partitions[0] = [2]int64{0, 3}
			return ev
		}},
		{"out of order delivery", "order", func(ev []Event, db *DBState) []Event {
			ev[2], ev[3] = ev[3], ev[2]
			return ev
		}},
		{"committed record redelivered", "redelivered-committed", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "recv", T: 6, G: "g", M: "m2", P: 0, O: 1, E: 2, ID: "b"})
		}},
		{"overlapping accepted commits", "overlapping-commits", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "commit", T: 6, G: "g", M: "m2", P: 0, E: 2, From: 1, To: 1, Sent: 6})
		}},
		{"later claim handed out before an accepted commit", "concurrent-claims", func(ev []Event, db *DBState) []Event {
			db.Log[0][2] = "c"
			db.Partitions[0] = [2]int64{0, 3}
			db.Cursors["g"][0] = 3
			return append(ev, Event{K: "pub", T: 1, ID: "c", P: 0, O: 2},
				Event{K: "recv", T: 3, G: "g", M: "m2", P: 0, O: 2, E: 2, ID: "c"})
		}},
		{"group not drained", "not-drained", func(ev []Event, db *DBState) []Event {
			db.Cursors["g"][0] = 1
			return ev
		}},
		{"offset skipped", "never-delivered", func(ev []Event, db *DBState) []Event {
			return ev[:2:2]
		}},
		{"job lost", "job-lost", func(ev []Event, db *DBState) []Event {
			delete(db.Archive, 7)
			return ev
		}},
		{"job completed twice", "job-completed-twice", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "jdone", T: 6, JID: 7, Tok: 2, M: "w2", Sent: 5})
		}},
		{"job still waiting", "job-unfinished", func(ev []Event, db *DBState) []Event {
			delete(db.Archive, 7)
			db.Jobs[7] = JobRow{State: "available"}
			return ev
		}},
		{"job re-claimed before its accepted completion", "job-concurrent", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "jrun", T: 2, JID: 7, Tok: 2, Att: 2, M: "w2"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, db := goodHistory()
			ev = c.break_(ev, db)
			r := Check(ev, db, nil)
			if r.ViolationCounts()[c.want] == 0 {
				t.Fatalf("want a %s violation, got:\n%s", c.want, r.Summary())
			}
		})
	}
}

// A publish attempted by a process killed before the answer may or may
// not be stored: both are fine.
func TestCheckerAllowsUnacknowledgedStored(t *testing.T) {
	ev, db := goodHistory()
	db.Log[0][2] = "c"
	db.Partitions[0] = [2]int64{0, 3}
	db.Cursors["g"][0] = 3
	ev = append(ev, Event{K: "pubtry", T: 1, IDs: []string{"c", "d"}},
		Event{K: "recv", T: 6, G: "g", M: "m1", P: 0, O: 2, E: 2, ID: "c"})
	r := Check(ev, db, nil)
	if !r.OK() || r.PubUnknown != 2 || r.PubUnknownStored != 1 {
		t.Fatalf("want no violation, 2 unknown, 1 stored:\n%s", r.Summary())
	}
}

func TestCheckerEffects(t *testing.T) {
	ev, db := goodHistory()
	db.Cursors["t"] = map[int32]int64{0: 2}
	db.Effects["t"] = map[int32]map[int64][]string{0: {0: {"a"}, 1: {"b", "b"}}}
	r := Check(ev, db, []string{"t"})
	if r.ViolationCounts()["effect-duplicate"] != 1 || r.Groups["t"].EffectDups != 1 {
		t.Fatalf("want one effect duplicate:\n%s", r.Summary())
	}
	db.Effects["t"][0][1] = nil
	r = Check(ev, db, []string{"t"})
	if r.ViolationCounts()["effect-missing"] != 1 {
		t.Fatalf("want a missing effect:\n%s", r.Summary())
	}
}

func TestPoisonRecord(t *testing.T) {
	if !PoisonRecord("producer-0-97") || !PoisonRecord("aproducer-1-194") {
		t.Error("multiples of 97 are poison")
	}
	if PoisonRecord("producer-0-98") || PoisonRecord("producer") || PoisonRecord("x-") {
		t.Error("only multiples of 97 are poison")
	}
}

// The disk-full attempts and the maintenance runs are counted, and are
// no violation.
func TestCheckerCountsDiskFullAndMaintenance(t *testing.T) {
	ev, db := goodHistory()
	ev = append(ev, Event{K: "full", T: 2, Kind: "pub"}, Event{K: "full", T: 2, Kind: "pub"},
		Event{K: "full", T: 2, Kind: "enq"}, Event{K: "maint", T: 3})
	r := Check(ev, db, nil)
	if !r.OK() || r.DiskFullPub != 2 || r.DiskFullEnq != 1 || r.MaintRuns != 1 {
		t.Fatalf("counts %d/%d/%d, report:\n%s", r.DiskFullPub, r.DiskFullEnq, r.MaintRuns, r.Summary())
	}
}

// Calls refused with PM124 (min_insync_replicas) are counted per kind
// and are no violation: nothing was acknowledged.
func TestCheckerCountsNotEnoughReplicas(t *testing.T) {
	ev, db := goodHistory()
	ev = append(ev, Event{K: "puberr", T: 2, IDs: []string{"x-1", "x-2"}, Code: "PM124"},
		Event{K: "puberr", T: 2, IDs: []string{"x-3"}, Code: "PM124"}, Event{K: "puberr", T: 2, IDs: []string{"x-4"}, Code: "PM021"})
	r := Check(ev, db, nil)
	if !r.OK() || r.NotEnoughReplicas["puberr"] != 2 || len(r.NotEnoughReplicas) != 1 ||
		!strings.Contains(r.Summary(), "not enough replicas (PM124") {
		t.Fatalf("counts %v, report:\n%s", r.NotEnoughReplicas, r.Summary())
	}
}

// A failover run takes only the kinds a formation can have, and the
// failover kinds need one.
func TestOptionsCheck(t *testing.T) {
	o := Options{Failover: true}
	o.defaults()
	if err := o.check(); err != nil || len(o.Faults) != len(FailoverFaults) {
		t.Fatalf("default failover run: %v, faults %v", err, o.Faults)
	}
	for _, bad := range []Options{
		{Failover: true, Faults: []string{FaultNetCutCommit}},
		{Failover: true, Faults: []string{FaultPGKill}},
		{Failover: true, DiskFull: true},
		{Failover: true, HTTPConsumers: 1},
		{Faults: []string{FaultSwitchover}},
	} {
		if err := bad.check(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	o = Options{DiskFull: true}
	o.defaults()
	if o.Faults[len(o.Faults)-1] != FaultDiskFull {
		t.Errorf("DiskFull run without the kind: %v", o.Faults)
	}
}

// goodKinds is a consistent kinds history: a diamond workflow (10, then
// 11 and 12, then 13), a sequence (20..23, 22 dead and passed over) and
// four jobs of limit key k (limit 2), times on the database's clock.
func goodKinds() ([]Event, *DBState) {
	ev, db := goodHistory()
	db.KindsKeyLimit = 2
	db.KindJobs = map[int64]KindJob{
		10: {State: "completed", AttemptedAt: 100, FinishedAt: 200},
		11: {State: "completed", DependsOn: []int64{10}, AttemptedAt: 210, FinishedAt: 300},
		12: {State: "completed", DependsOn: []int64{10}, AttemptedAt: 220, FinishedAt: 310},
		13: {State: "completed", DependsOn: []int64{11, 12}, AttemptedAt: 320, FinishedAt: 400},
		20: {State: "completed", SequenceKey: "s", AttemptedAt: 100, FinishedAt: 150},
		21: {State: "completed", SequenceKey: "s", AttemptedAt: 170, FinishedAt: 180},
		22: {State: "dead", SequenceKey: "s", AttemptedAt: 190, FinishedAt: 195},
		23: {State: "completed", SequenceKey: "s", AttemptedAt: 200, FinishedAt: 210},
		30: {State: "completed", LimitKey: "k", AttemptedAt: 100, FinishedAt: 200},
		31: {State: "completed", LimitKey: "k", AttemptedAt: 150, FinishedAt: 250},
		32: {State: "completed", LimitKey: "k", AttemptedAt: 201, FinishedAt: 300},
		33: {State: "completed", LimitKey: "k", AttemptedAt: 260, FinishedAt: 300},
		// Its dependency went dead: cancelled, never run.
		40: {State: "dead", AttemptedAt: 100, FinishedAt: 110},
		41: {State: "cancelled", DependsOn: []int64{40}, FinishedAt: 110},
	}
	for id := range db.KindJobs {
		ev = append(ev, Event{K: "kenq", T: 1, JID: id, Kind: "x"})
	}
	// The kworkers' starts: 21's first attempt failed at 160, 31 was
	// claimed twice.
	ev = append(ev, Event{K: "krun", T: 2, JID: 21, At: 160}, Event{K: "krun", T: 2, JID: 21, At: 170},
		Event{K: "krun", T: 2, JID: 31, At: 150}, Event{K: "krun", T: 2, JID: 31, At: 180})
	return ev, db
}

func TestCheckerKindsAcceptsConsistentHistory(t *testing.T) {
	ev, db := goodKinds()
	r := Check(ev, db, nil)
	if !r.OK() {
		t.Fatalf("violations on a consistent history:\n%s", r.Summary())
	}
	k := r.Kinds
	if k.Workflow != 4 || k.Cancelled != 1 || k.Sequence != 4 || k.SeqPairs != 3 || k.Limited != 4 || k.MaxPerKey != 2 || k.DepsChecked != 4 {
		t.Fatalf("figures: %+v", k)
	}
}

// Each case breaks one invariant of the kinds queue; the checker must
// name it.
func TestCheckerKindsCatchesViolations(t *testing.T) {
	set := func(db *DBState, id int64, f func(j *KindJob)) {
		j := db.KindJobs[id]
		f(&j)
		db.KindJobs[id] = j
	}
	cases := []struct {
		name   string
		want   string
		break_ func(ev []Event, db *DBState) []Event
	}{
		{"dependent started before a dependency completed (recorded start)", "dep-early", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "krun", JID: 13, At: 305})
		}},
		{"dependent started before a dependency completed (database's start)", "dep-early", func(ev []Event, db *DBState) []Event {
			set(db, 11, func(j *KindJob) { j.AttemptedAt = 150 })
			return ev
		}},
		{"dependent ran though a dependency went dead", "dep-not-completed", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "krun", JID: 41, At: 120})
		}},
		{"two jobs of a sequence at once", "sequence-overlap", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "krun", JID: 21, At: 140})
		}},
		{"a sequence out of enqueue order", "sequence-overlap", func(ev []Event, db *DBState) []Event {
			// 23 ran first and finished before 21 and 22 started.
			set(db, 23, func(j *KindJob) { j.AttemptedAt, j.FinishedAt = 152, 155 })
			return ev
		}},
		{"a later job ran while the earlier never finished", "sequence-overlap", func(ev []Event, db *DBState) []Event {
			set(db, 22, func(j *KindJob) { j.State, j.FinishedAt = "running", 0 })
			return ev
		}},
		{"three jobs of a key at once, limit 2", "key-limit-exceeded", func(ev []Event, db *DBState) []Event {
			db.KindJobs[34] = KindJob{State: "completed", LimitKey: "k", AttemptedAt: 160, FinishedAt: 190}
			return ev
		}},
		{"key limit exceeded by a recorded earlier attempt", "key-limit-exceeded", func(ev []Event, db *DBState) []Event {
			// 32's first attempt (recorded) ran before 30 finished.
			return append(ev, Event{K: "krun", JID: 32, At: 190})
		}},
		{"kinds job lost", "kind-job-lost", func(ev []Event, db *DBState) []Event {
			return append(ev, Event{K: "kenq", JID: 99, Kind: "seq"})
		}},
		{"kinds job unfinished", "kind-job-unfinished", func(ev []Event, db *DBState) []Event {
			set(db, 33, func(j *KindJob) { j.State = "pending" })
			return ev
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, db := goodKinds()
			ev = c.break_(ev, db)
			r := Check(ev, db, nil)
			if r.ViolationCounts()[c.want] == 0 {
				t.Fatalf("want a %s violation, got %v:\n%s", c.want, r.ViolationCounts(), r.Summary())
			}
		})
	}
}

// A start both recorded (krun) and the database's last attempt is one
// start: one violation, not two.
func TestCheckerKindsCountsAStartOnce(t *testing.T) {
	ev, db := goodKinds()
	j := db.KindJobs[21]
	j.AttemptedAt = 140
	db.KindJobs[21] = j
	ev = append(ev, Event{K: "krun", JID: 21, At: 140})
	r := Check(ev, db, nil)
	if n := r.ViolationCounts()["sequence-overlap"]; n != 1 {
		t.Fatalf("want one sequence-overlap, got %d:\n%s", n, r.Summary())
	}
}

// The dead-letter group (Consumer.Run, MaxDeliveries) is checked
// partition by partition with the offsets its handler took.
func TestCheckerDeadLetters(t *testing.T) {
	ev, db := goodHistory()
	// b-97 is poison; a is not.
	db.Log[0][1] = "b-97"
	ev[1].ID, ev[3].ID = "b-97", "b-97"
	db.Cursors[groupDLQ] = map[int32]int64{0: 2}
	db.DeadLetters = map[int32]map[int64][]string{0: {1: {"b-97"}}}
	ev = append(ev, Event{K: "dlqh", T: 3, G: groupDLQ, P: 0, O: 0, ID: "a"})
	check := func() *Report {
		dir := t.TempDir()
		writeHistory(t, dir, "h", ev)
		r, _, err := CheckHistory(dir, db, CheckOptions{DLQGroup: groupDLQ})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := check(); !r.OK() || r.DeadLettered != 1 || r.DeadLetterHandled != 1 {
		t.Fatalf("consistent dead letters: %v\n%s", r.ViolationCounts(), r.Summary())
	}
	ev = ev[:len(ev)-1]
	if r := check(); r.ViolationCounts()["dlq-unhandled"] != 1 {
		t.Fatalf("want dlq-unhandled: %v", r.ViolationCounts())
	}
	ev = append(ev, Event{K: "dlqh", T: 3, G: groupDLQ, P: 0, O: 0, ID: "a"})
	db.DeadLetters[0][1] = append(db.DeadLetters[0][1], "b-97")
	if r := check(); r.ViolationCounts()["dlq-twice"] != 1 {
		t.Fatalf("want dlq-twice: %v", r.ViolationCounts())
	}
	delete(db.DeadLetters[0], 1)
	db.Cursors[groupDLQ][0] = 1
	if r := check(); r.ViolationCounts()["dlq-missing"] != 1 || r.ViolationCounts()["dlq-cursor"] != 1 {
		t.Fatalf("want dlq-missing and dlq-cursor: %v", r.ViolationCounts())
	}
}

func writeHistory(t *testing.T, dir, name string, evs []Event) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(append(b, '\n')) // Flush reports the error
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A larger synthetic history, written by several agents, is checked unit
// by unit: each group's events on one partition are loaded alone, the
// publishes in logBuckets parts by id and the jobs in queueBuckets parts,
// so no unit holds more than a fraction of the history. The structure is
// asserted, not the time or the memory.
func TestCheckerStreamsByUnit(t *testing.T) {
	const parts, perPart, batch, jobs = 8, 500, 50, 400
	groups := []string{"g1", "g2"}
	db := &DBState{
		Partitions: map[int32][2]int64{}, Log: map[int32]map[int64]string{},
		Cursors: map[string]map[int32]int64{}, Effects: map[string]map[int32]map[int64][]string{},
		Jobs: map[int64]JobRow{}, Archive: map[int64]string{},
	}
	dir := t.TempDir()
	var producer []Event
	perGroup := map[string][]Event{}
	commits := 0
	for p := range int32(parts) {
		db.Partitions[p] = [2]int64{0, perPart}
		db.Log[p] = map[int64]string{}
		for o := range int64(perPart) {
			id := fmt.Sprintf("producer-%d-%d", p, o)
			db.Log[p][o] = id
			producer = append(producer, Event{K: "pub", T: int64(p)*perPart + o, ID: id, P: p, O: o})
		}
		for gi, g := range groups {
			if db.Cursors[g] == nil {
				db.Cursors[g] = map[int32]int64{}
			}
			db.Cursors[g][p] = perPart
			for from := int64(0); from < perPart; from += batch {
				e := int64(p)*1000 + from + int64(gi)
				for o := from; o < from+batch; o++ {
					perGroup[g] = append(perGroup[g], Event{K: "recv", T: 1e6 + o, G: g, M: g + "-m", P: p, O: o, E: e, ID: db.Log[p][o]})
				}
				perGroup[g] = append(perGroup[g], Event{K: "commit", T: 1e6 + from + batch, G: g, M: g + "-m", P: p, E: e,
					From: from, To: from + batch - 1, Sent: 1e6 + from + batch})
				commits++
			}
		}
	}
	var queue []Event
	for j := int64(1); j <= jobs; j++ {
		db.Archive[j] = "completed"
		queue = append(queue, Event{K: "enq", T: j, JID: j, UID: fmt.Sprint(j)},
			Event{K: "jrun", T: j + 1, JID: j, Tok: j, Att: 1, M: "w"},
			Event{K: "jdone", T: j + 3, JID: j, Tok: j, M: "w", Sent: j + 2})
	}
	writeHistory(t, dir, "producer0.1", producer)
	for _, g := range groups {
		writeHistory(t, dir, "consumer-"+g, perGroup[g])
	}
	writeHistory(t, dir, "enqueuer0.1", queue)
	work := filepath.Join(t.TempDir(), "work")
	r, _, err := CheckHistory(dir, db, CheckOptions{Work: work})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Published != parts*perPart || r.JobsCompleted != jobs {
		t.Fatalf("consistent synthetic history:\n%s", r.Summary())
	}
	total := len(producer) + len(queue)
	for _, g := range groups {
		total += len(perGroup[g])
	}
	// Every event the checks use was loaded exactly once, in its unit.
	sum, logs, queues := 0, 0, 0
	var groupOrder []string
	for _, u := range r.Units {
		sum += u.Events
		switch {
		case strings.HasPrefix(u.Name, "log."):
			logs++
		case strings.HasPrefix(u.Name, "queue."):
			queues++
		case strings.HasPrefix(u.Name, "group."):
			groupOrder = append(groupOrder, u.Name)
			// One group on one partition: its deliveries and commits.
			if want := perPart + perPart/batch; u.Events != want {
				t.Errorf("unit %s holds %d events, want %d (one group, one partition)", u.Name, u.Events, want)
			}
		}
		if u.Events > total/8 {
			t.Errorf("unit %s holds %d of %d events", u.Name, u.Events, total)
		}
	}
	if sum != total || logs != logBuckets || queues != queueBuckets || len(groupOrder) != parts*len(groups) {
		t.Fatalf("units %v: %d events of %d, %d log, %d queue, %d group units", r.Units, sum, total, logs, queues, len(groupOrder))
	}
	// Partition by partition: both groups of partition 0, then of 1 ...
	for i, name := range groupOrder {
		want := groupUnit(gp{groups[i%len(groups)], int32(i / len(groups))})
		if name != want {
			t.Fatalf("group unit %d is %s, want %s (order %v)", i, name, want, groupOrder)
		}
	}
	// The unit files are gone once checked.
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Errorf("work directory %s left: %v", work, err)
	}
	if left, _ := filepath.Glob(filepath.Join(work, "*")); len(left) != 0 {
		t.Errorf("unit files left: %v", left)
	}
}
