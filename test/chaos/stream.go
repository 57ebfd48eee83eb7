package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// The checker streams the histories: one pass reads every history file
// line by line and writes each event to the file of the unit it belongs
// to, then each unit is loaded and checked alone. What is held in memory
// at once is the database state (DBState) and one unit's events, never
// the whole history (a goal run writes about 2 GB of it).
//
// The units are:
//
//	log bucket    the publish events (pub, pubtry, puberr) of the record
//	              ids whose hash falls in the bucket (logBuckets of them):
//	              every invariant of the log is about one id
//	group unit    the events of one group on one partition (recv, commit,
//	              commiterr, release, dlqh): every invariant of a group is
//	              about one partition's claims
//	queue bucket  the events of the jobs whose id falls in the bucket
//	              (queueBuckets of them): every invariant of the queue is
//	              about one job
//	kinds         the kinds queue's kenq and krun, streamed (the checks
//	              work on the database's jobs and one start time per claim)
//
// Counters (disk full, maintenance, gathered claims, ...), the faults and
// the few timestamps the fault table needs are gathered during the split.
const (
	logBuckets   = 16
	queueBuckets = 16
)

// CheckOptions are the checker's inputs besides the histories and the
// database state.
type CheckOptions struct {
	// TxGroups are the groups consumed with ProcessTx (checked through
	// their effect rows).
	TxGroups []string
	// DLQGroup, when set, is the group consumed with Consumer.Run and
	// MaxDeliveries (checkDeadLetters).
	DLQGroup string
	// Work is the directory the split writes its unit files to (removed
	// afterwards); default a temporary directory.
	Work string
}

// UnitStat is one unit the checker loaded: its name and how many events
// it held. Report.Units lists them in the order they were checked.
type UnitStat struct {
	Name   string
	Events int
}

// Check checks events held in memory (tests): it writes them to a
// history file and checks that like a run's histories.
func Check(events []Event, db *DBState, txGroups []string) *Report {
	dir, err := os.MkdirTemp("", "pgmsg-check-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	f, err := os.Create(filepath.Join(dir, "h.jsonl"))
	if err != nil {
		panic(err)
	}
	w := bufio.NewWriter(f)
	for _, ev := range events {
		b, _ := json.Marshal(ev)
		_, _ = w.Write(append(b, '\n')) // Flush reports the error
	}
	if err := w.Flush(); err != nil {
		panic(err)
	}
	f.Close()
	r, _, err := CheckHistory(dir, db, CheckOptions{TxGroups: txGroups})
	if err != nil {
		panic(err)
	}
	return r
}

// CheckHistory verifies the invariants of the log and the queue over the
// histories in dir (every *.jsonl file) and the final database state,
// unit by unit, and computes the fault table.
func CheckHistory(dir string, db *DBState, o CheckOptions) (*Report, map[string]*FaultStats, error) {
	work := o.Work
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "pgmsg-check-"); err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(work)
	} else {
		if err := os.MkdirAll(work, 0o755); err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(work)
	}
	r := &Report{Groups: map[string]*GroupStats{}}
	sp, err := splitHistory(dir, work, r)
	if err != nil {
		return nil, nil, err
	}
	r.TornLines = sp.torn
	for b := range logBuckets {
		if err := checkLogBucket(r, sp, db, b); err != nil {
			return nil, nil, err
		}
	}
	checkOffsets(r, db)
	if err := checkGroupUnits(r, sp, db, o); err != nil {
		return nil, nil, err
	}
	if err := checkQueueBuckets(r, sp, db); err != nil {
		return nil, nil, err
	}
	if err := checkKinds(r, sp, db); err != nil {
		return nil, nil, err
	}
	return r, sp.faultStats(db), nil
}

// unitFile is one unit's events on disk.
type unitFile struct {
	path  string
	f     *os.File
	w     *bufio.Writer
	lines int
}

// split is the histories split into unit files, and what the split
// gathered on the way.
type split struct {
	work  string
	units map[string]*unitFile
	// groupUnits: the (group, partition) pairs that have events.
	groupUnits map[gp]bool
	torn       int
	// enqUnknown and enqTried count the uids of failed and attempted
	// enqueues (checkQueue).
	enqUnknown, enqTried int
	// For the fault table: the faults, each progress path's timestamps,
	// and when each failed publish failed.
	faults []Event
	paths  map[string][]int64
	failed map[string]int64
}

func idBucket(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % logBuckets)
}

func jobBucket(jid int64) int { return int(uint64(jid) % queueBuckets) }

func logUnit(b int) string   { return fmt.Sprintf("log.%02d", b) }
func queueUnit(b int) string { return fmt.Sprintf("queue.%02d", b) }
func groupUnit(k gp) string  { return fmt.Sprintf("group.%x.%d", k.g, k.p) }

const kindsUnit = "kinds"

func (s *split) write(unit string, line []byte) error {
	u := s.units[unit]
	if u == nil {
		u = &unitFile{path: filepath.Join(s.work, unit+".jsonl")}
		var err error
		if u.f, err = os.Create(u.path); err != nil {
			return err
		}
		u.w = bufio.NewWriterSize(u.f, 64<<10)
		s.units[unit] = u
	}
	u.lines++
	if _, err := u.w.Write(line); err != nil {
		return err
	}
	return u.w.WriteByte('\n')
}

// splitHistory reads every *.jsonl file of dir line by line and writes
// each event the checks need to its unit's file. A line that does not
// parse (a process killed mid-write: a torn last line) is skipped and
// counted.
func splitHistory(dir, work string, r *Report) (*split, error) {
	s := &split{work: work, units: map[string]*unitFile{}, groupUnits: map[gp]bool{},
		paths: map[string][]int64{}, failed: map[string]int64{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	for _, name := range files {
		if err := s.splitFile(name, r); err != nil {
			return nil, err
		}
	}
	for _, u := range s.units {
		if err := u.w.Flush(); err != nil {
			return nil, err
		}
		if err := u.f.Close(); err != nil {
			return nil, err
		}
	}
	for _, ts := range s.paths {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	}
	sort.SliceStable(s.faults, func(i, j int) bool { return s.faults[i].T < s.faults[j].T })
	return s, nil
}

func (s *split) splitFile(name string, r *Report) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			s.torn++
			continue
		}
		if err := s.route(&ev, line, r); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (s *split) route(ev *Event, line []byte, r *Report) error {
	if ev.Code == "PM124" {
		if r.NotEnoughReplicas == nil {
			r.NotEnoughReplicas = map[string]int{}
		}
		r.NotEnoughReplicas[ev.K]++
	}
	switch ev.K {
	case "full":
		switch ev.Kind {
		case "pub":
			r.DiskFullPub++
		case "enq":
			r.DiskFullEnq++
		}
	case "maint":
		r.MaintRuns++
	case "gathered":
		r.GatheredClaims += ev.N
	case "cached":
		r.CachedRecords += ev.N
	case "pubretried":
		r.PubRetried++
		if ev.Dup {
			r.PubRetriedDup++
		}
	case "lost":
		r.SessionsLost++
	case "kskip":
		r.Kinds.Skipped += ev.N
	case "fault":
		s.faults = append(s.faults, *ev)
	case "pub":
		s.paths["pub"] = append(s.paths["pub"], ev.T)
		return s.write(logUnit(idBucket(ev.ID)), line)
	case "pubtry", "puberr":
		// One event per bucket, with the ids of that bucket.
		by := map[int][]string{}
		for _, id := range ev.IDs {
			if ev.K == "puberr" {
				s.failed[id] = ev.T
			}
			by[idBucket(id)] = append(by[idBucket(id)], id)
		}
		for b, ids := range by {
			one, _ := json.Marshal(Event{K: ev.K, T: ev.T, IDs: ids, Code: ev.Code})
			if err := s.write(logUnit(b), one); err != nil {
				return err
			}
		}
	case "recv", "commit", "commiterr", "release", "dlqh":
		if ev.K == "commit" {
			k := fmt.Sprintf("commit %s/%d", ev.G, ev.P)
			s.paths[k] = append(s.paths[k], ev.T)
		}
		k := gp{ev.G, ev.P}
		s.groupUnits[k] = true
		return s.write(groupUnit(k), line)
	case "enqerr":
		s.enqUnknown += len(ev.UIDs)
	case "enqtry":
		s.enqTried += len(ev.UIDs)
	case "enq", "jrun", "jdone", "jdoneerr", "jfailerr":
		if ev.K == "jdone" {
			s.paths["jdone"] = append(s.paths["jdone"], ev.T)
		}
		return s.write(queueUnit(jobBucket(ev.JID)), line)
	case "kenq", "krun":
		return s.write(kindsUnit, line)
	}
	return nil
}

// each streams the events of unit (none when it has no file) to fn.
func (s *split) each(unit string, fn func(ev *Event)) error {
	u := s.units[unit]
	if u == nil {
		return nil
	}
	f, err := os.Open(u.path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("%s: %w", u.path, err)
		}
		fn(&ev)
	}
	return sc.Err()
}

// load returns the events of unit in time order (as a sort of the whole
// history would have them: by T, ties in file and line order), records
// the unit in r.Units and removes its file.
func (s *split) load(r *Report, unit string) ([]Event, error) {
	var evs []Event
	if err := s.each(unit, func(ev *Event) { evs = append(evs, *ev) }); err != nil {
		return nil, err
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].T < evs[j].T })
	r.Units = append(r.Units, UnitStat{Name: unit, Events: len(evs)})
	if u := s.units[unit]; u != nil {
		_ = os.Remove(u.path)
	}
	return evs, nil
}

// checkLogBucket checks the publishes of the ids of bucket b against
// where the database stores them.
func checkLogBucket(r *Report, s *split, db *DBState, b int) error {
	events, err := s.load(r, logUnit(b))
	if err != nil {
		return err
	}
	acked := map[string][2]int64{}
	unknown := map[string]bool{}
	for _, ev := range events {
		switch ev.K {
		case "pub":
			if prev, dup := acked[ev.ID]; dup {
				r.violate("pub-acked-twice", "id %s acknowledged at %v and at %d/%d", ev.ID, prev, ev.P, ev.O)
			}
			acked[ev.ID] = [2]int64{int64(ev.P), ev.O}
		case "puberr", "pubtry":
			for _, id := range ev.IDs {
				unknown[id] = true
			}
		}
	}
	// Attempted (pubtry) or failed (puberr) and never acknowledged: the
	// outcome is unknown to the client; stored or not, both are allowed.
	for id := range acked {
		delete(unknown, id)
	}
	r.Published += len(acked)
	r.PubUnknown += len(unknown)
	// Where the database stores each id of the bucket.
	where := map[string][][2]int64{}
	for p, se := range db.Partitions {
		offs := db.Log[p]
		for o := se[0]; o < se[1]; o++ {
			if id, ok := offs[o]; ok && idBucket(id) == b {
				where[id] = append(where[id], [2]int64{int64(p), o})
			}
		}
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
	return nil
}

// checkOffsets: every partition's offsets are gapless between its start
// and next offset.
func checkOffsets(r *Report, db *DBState) {
	for p, se := range db.Partitions {
		offs := db.Log[p]
		if int64(len(offs)) != se[1]-se[0] {
			r.violate("offset-gap", "partition %d: %d records stored for offsets [%d, %d)", p, len(offs), se[0], se[1])
		}
		for o := se[0]; o < se[1]; o++ {
			if _, ok := offs[o]; !ok {
				r.violate("offset-gap", "partition %d: offset %d missing below next_offset %d", p, o, se[1])
			}
		}
		for o := range offs {
			if o < se[0] || o >= se[1] {
				r.violate("offset-gap", "partition %d: offset %d stored outside [%d, %d)", p, o, se[0], se[1])
			}
		}
		r.LogRecords += len(offs)
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

func (r *Report) groupStats(g string) *GroupStats {
	s := r.Groups[g]
	if s == nil {
		s = &GroupStats{}
		r.Groups[g] = s
	}
	return s
}

// checkGroupUnits checks every group on every partition, partition by
// partition: the partitions and groups of the database state and those
// the histories name.
func checkGroupUnits(r *Report, s *split, db *DBState, o CheckOptions) error {
	isTx := map[string]bool{}
	for _, g := range o.TxGroups {
		isTx[g] = true
	}
	for g := range db.Cursors {
		r.groupStats(g)
	}
	parts := map[int32]bool{}
	for p := range db.Partitions {
		parts[p] = true
	}
	for p := range db.Log {
		parts[p] = true
	}
	for k := range s.groupUnits {
		parts[k.p] = true
	}
	if o.DLQGroup != "" {
		for p := range db.DeadLetters {
			parts[p] = true
		}
	}
	ps := make([]int32, 0, len(parts))
	for p := range parts {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	for _, p := range ps {
		groups := map[string]bool{}
		if _, ok := db.Partitions[p]; ok {
			for g := range db.Cursors {
				groups[g] = true
			}
		}
		for k := range s.groupUnits {
			if k.p == p {
				groups[k.g] = true
			}
		}
		gs := make([]string, 0, len(groups))
		for g := range groups {
			gs = append(gs, g)
		}
		sort.Strings(gs)
		var handled map[int64]bool
		for _, g := range gs {
			h, err := checkGroupUnit(r, s, db, gp{g, p}, isTx[g], g == o.DLQGroup)
			if err != nil {
				return err
			}
			if g == o.DLQGroup {
				handled = h
			}
		}
		if o.DLQGroup != "" {
			checkDeadLetters(r, db, o.DLQGroup, p, handled)
		}
	}
	return nil
}

// checkGroupUnit checks the claims of group key.g on partition key.p and,
// after the drain, its completeness there. For the dead-letter group it
// returns the offsets its handler took (dlqh).
func checkGroupUnit(r *Report, s *split, db *DBState, key gp, isTx, dlq bool) (map[int64]bool, error) {
	events, err := s.load(r, groupUnit(key))
	if err != nil {
		return nil, err
	}
	st := r.groupStats(key.g)
	claims := map[claimKey]*claimInfo{}
	get := func(k claimKey) *claimInfo {
		c := claims[k]
		if c == nil {
			c = &claimInfo{}
			claims[k] = c
		}
		return c
	}
	var handled map[int64]bool
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
			st.Commits++
		case "commiterr":
			if ev.Tx {
				st.Unknown++
				continue
			}
			c := get(claimKey{ev.G, ev.P, ev.E})
			if ev.Code == "PM008" || ev.Code == "PM009" {
				c.rejected = true
				st.Rejected++
			} else {
				c.unknown = true
				st.Unknown++
			}
		case "release":
			get(claimKey{ev.G, ev.P, ev.E}).released = true
		case "dlqh":
			if !dlq {
				continue
			}
			if handled == nil {
				handled = map[int64]bool{}
			}
			handled[ev.O] = true
			if PoisonRecord(ev.ID) {
				r.violate("dlq-poison-handled", "poison record %s at partition %d offset %d was handled", ev.ID, ev.P, ev.O)
			}
		}
	}
	ks := make([]claimKey, 0, len(claims))
	for k := range claims {
		ks = append(ks, k)
	}
	// Claims in the order the database handed them out. Epochs are
	// random, so the order comes from the offsets: a claim starts at the
	// group's cursor, which only moves forward, so start offsets never
	// decrease from one claim to the next. Claims starting at the same
	// offset were each released, expired or fenced before the next was
	// made, except the last one, the only one whose commit can have been
	// accepted; among the others the delivery time decides.
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
			if !first && !isTx && start > maxDelivered+1 {
				r.violate("skip", "group %s partition %d epoch %d starts at %d, after %d: offsets skipped", k.g, k.p, k.e, start, maxDelivered)
			}
			if first && start != db.Partitions[k.p][0] && !isTx {
				r.violate("skip", "group %s partition %d: first delivery at %d, not %d", k.g, k.p, start, db.Partitions[k.p][0])
			}
			first = false
			for _, o := range c.offs {
				st.Delivered++
				if prev := seen[o]; prev != nil {
					st.Duplicates++
					switch {
					case prev.released:
						st.DupReleased++
					case prev.rejected || prev.unknown:
						st.DupFenced++
					default:
						st.DupDied++
					}
				} else {
					st.Distinct++
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
	// Completeness: after the drain the group's cursor is at the end and
	// every offset below it was delivered (ProcessTx groups: has exactly
	// one effect row). The dead-letter group is checked by
	// checkDeadLetters (Consumer.Run records what it handled).
	cur, isCursor := db.Cursors[key.g]
	se, isPart := db.Partitions[key.p]
	if !isCursor || !isPart || key.g == groupDLQ {
		return handled, nil
	}
	g, p := key.g, key.p
	if cur[p] != se[1] {
		r.violate("not-drained", "group %s partition %d: cursor %d, end %d", g, p, cur[p], se[1])
	}
	if isTx {
		eff := db.Effects[g][p]
		for o := se[0]; o < cur[p]; o++ {
			ids := eff[o]
			switch {
			case len(ids) == 0:
				r.violate("effect-missing", "group %s partition %d offset %d below the cursor has no effect", g, p, o)
			case len(ids) > 1:
				st.EffectDups += len(ids) - 1
				r.violate("effect-duplicate", "group %s partition %d offset %d has %d effects", g, p, o, len(ids))
			}
			if len(ids) > 0 && ids[0] != db.Log[p][o] {
				r.violate("effect-mismatch", "group %s partition %d offset %d effect %s, log %s", g, p, o, ids[0], db.Log[p][o])
			}
		}
		return handled, nil
	}
	for o := se[0]; o < cur[p]; o++ {
		if seen[o] == nil {
			r.violate("never-delivered", "group %s partition %d offset %d is below the cursor %d but was never delivered", g, p, o, cur[p])
		}
	}
	return handled, nil
}

// checkDeadLetters checks, on partition p, the group consumed with
// Consumer.Run and MaxDeliveries: every stored poison record was set
// aside in the dead-letter topic exactly once (with its own id) and
// never handled; every other stored record was handled at least once
// and never set aside; the group's cursor reached the end of the
// partition. handled are the offsets its handler took there.
func checkDeadLetters(r *Report, db *DBState, group string, p int32, handled map[int64]bool) {
	for o, id := range db.Log[p] {
		dead := db.DeadLetters[p][o]
		switch {
		case PoisonRecord(id) && len(dead) == 0:
			r.violate("dlq-missing", "poison record %s at partition %d offset %d is not in the dead-letter topic", id, p, o)
		case PoisonRecord(id) && len(dead) > 1:
			r.violate("dlq-twice", "poison record %s at partition %d offset %d set aside %d times", id, p, o, len(dead))
		case PoisonRecord(id) && dead[0] != id:
			r.violate("dlq-mismatch", "partition %d offset %d holds %s, its dead letter %s", p, o, id, dead[0])
		case PoisonRecord(id):
			r.DeadLettered++
		case len(dead) > 0:
			r.violate("dlq-wrong", "record %s at partition %d offset %d was set aside", id, p, o)
		case !handled[o]:
			r.violate("dlq-unhandled", "record %s at partition %d offset %d was never handled by %s", id, p, o, group)
		default:
			r.DeadLetterHandled++
		}
	}
	for o := range db.DeadLetters[p] {
		if _, ok := db.Log[p][o]; !ok {
			r.violate("dlq-phantom", "a dead letter names partition %d offset %d, which is not stored", p, o)
		}
	}
	if se, ok := db.Partitions[p]; ok {
		if c := db.Cursors[group][p]; c != se[1] {
			r.violate("dlq-cursor", "group %s partition %d at %d, end %d", group, p, c, se[1])
		}
	}
}

// deferred holds violations that stand only if a condition known at the
// end holds (job-phantom: no enqueue of unknown outcome): their count
// and the first messages.
type deferred struct {
	n    int
	msgs []string
}

func (d *deferred) add(format string, args ...any) {
	d.n++
	if len(d.msgs) < 11 {
		d.msgs = append(d.msgs, fmt.Sprintf(format, args...))
	}
}

// checkQueueBuckets checks the jobs of the queue, bucket by bucket.
func checkQueueBuckets(r *Report, s *split, db *DBState) error {
	var phantom deferred
	enqueued := 0
	for b := range queueBuckets {
		n, err := checkQueueBucket(r, s, db, b, &phantom)
		if err != nil {
			return err
		}
		enqueued += n
	}
	r.Enqueued = enqueued
	r.EnqUnknown = s.enqUnknown
	unknownUIDs := s.enqUnknown
	if s.enqTried > enqueued {
		// An enqueue killed mid-call may have committed jobs nobody
		// acknowledged: allow completions of unknown jobs then.
		unknownUIDs = max(unknownUIDs, s.enqTried-enqueued)
	}
	if unknownUIDs == 0 {
		for i := range phantom.n {
			msg := "..."
			if i < len(phantom.msgs) {
				msg = phantom.msgs[i]
			}
			r.violate("job-phantom", "%s", msg)
		}
	}
	return nil
}

// checkQueueBucket checks the jobs whose id falls in bucket b and returns
// how many enqueues were acknowledged. Completions of jobs never
// enqueued go to phantom.
func checkQueueBucket(r *Report, s *split, db *DBState, b int, phantom *deferred) (int, error) {
	events, err := s.load(r, queueUnit(b))
	if err != nil {
		return 0, err
	}
	enq := map[int64]Event{}
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
		if _, ok := enq[jid]; !ok {
			phantom.add("job %d completed but never enqueued", jid)
		}
	}
	// Fencing in time: a job claimed again (a later attempt) must not have
	// been handed out before an accepted completion of an earlier claim
	// was sent. Lease tokens are random, so claims are ordered by attempt
	// (the agent never snoozes), not by token.
	type runKey struct{ jid, tok int64 }
	claimAtt := map[runKey]int{}
	for _, run := range runsEv {
		claimAtt[runKey{run.JID, run.Tok}] = run.Att
	}
	for _, run := range runsEv {
		for _, d := range done[run.JID] {
			att, ok := claimAtt[runKey{d.JID, d.Tok}]
			if ok && run.Tok != d.Tok && run.Att > att && run.T < d.Sent {
				r.violate("job-concurrent", "job %d token %d claimed by %s at %d before token %d's accepted completion was sent at %d",
					run.JID, run.Tok, run.M, run.T, d.Tok, d.Sent)
			}
		}
	}
	for jid, st := range db.Archive {
		if jobBucket(jid) != b {
			continue
		}
		if _, ok := enq[jid]; !ok && st == "completed" {
			phantom.add("job %d archived but never enqueued", jid)
		}
	}
	return len(enq), nil
}

// checkKinds checks the kinds queue: every acknowledged job is in the
// database and finished, and the three invariants of kinds_check.go
// hold. The kworkers' starts (krun) are streamed into one start time per
// claim.
func checkKinds(r *Report, s *split, db *DBState) error {
	st := &r.Kinds
	// Each kinds job's attempt starts on the database's clock: those the
	// kworkers recorded (krun "at", the claim's attempted_at) and the
	// database's last one.
	starts := map[int64][]int64{}
	n := 0
	err := s.each(kindsUnit, func(ev *Event) {
		n++
		switch {
		case ev.K == "kenq":
			st.Enqueued++
			j, ok := db.KindJobs[ev.JID]
			switch {
			case !ok:
				r.violate("kind-job-lost", "%s job %d acknowledged but neither archived nor live", ev.Kind, ev.JID)
			case j.State != "completed" && j.State != "cancelled" && j.State != "dead":
				r.violate("kind-job-unfinished", "%s job %d still %s after the drain", ev.Kind, ev.JID, j.State)
			}
		case ev.K == "krun" && ev.At != 0:
			st.Starts++
			starts[ev.JID] = append(starts[ev.JID], ev.At)
		}
	})
	if err != nil {
		return err
	}
	r.Units = append(r.Units, UnitStat{Name: kindsUnit + " (streamed)", Events: n})
	for id, j := range db.KindJobs {
		if j.AttemptedAt != 0 {
			starts[id] = append(starts[id], j.AttemptedAt)
		}
	}
	for id, s := range starts {
		sort.Slice(s, func(i, k int) bool { return s[i] < s[k] })
		// The database's last attempt is usually also a recorded krun:
		// one start, not two (each violation was reported twice).
		starts[id] = slices.Compact(s)
	}
	checkDependencies(r, db.KindJobs, starts)
	checkSequences(r, db.KindJobs, starts)
	checkKeyLimits(r, db.KindJobs, starts, db.KindsKeyLimit)
	return nil
}

// faultStats computes, per fault kind, how many were injected and how long
// the system took to make progress on every path again.
func (s *split) faultStats(db *DBState) map[string]*FaultStats {
	// Which of the failed publishes were nevertheless stored.
	stored := map[string]bool{}
	if len(s.failed) > 0 {
		for _, offs := range db.Log {
			for _, id := range offs {
				if _, ok := s.failed[id]; ok {
					stored[id] = true
				}
			}
		}
	}
	next := func(ts []int64, after int64) (int64, bool) {
		i := sort.Search(len(ts), func(i int) bool { return ts[i] > after })
		if i == len(ts) {
			return 0, false
		}
		return ts[i], true
	}
	out := map[string]*FaultStats{}
	for _, f := range s.faults {
		st := out[f.Kind]
		if st == nil {
			st = &FaultStats{}
			out[f.Kind] = st
		}
		st.Injected++
		rec := time.Duration(0)
		ok := true
		// Progress paths: publishes, job completions, and the commits of
		// each (group, partition): a partition stuck behind a dead member
		// counts.
		for _, ts := range s.paths {
			t, found := next(ts, f.End)
			if !found {
				ok = false
				break
			}
			rec = max(rec, time.Duration(t-f.End))
		}
		if ok {
			st.recoveries = append(st.recoveries, rec)
		}
		for id, t := range s.failed {
			if t >= f.Start && t <= f.End+int64(rec)+int64(time.Second) {
				st.InFlightFailed++
				if stored[id] {
					st.InFlightStored++
				}
			}
		}
	}
	for _, st := range out {
		sort.Slice(st.recoveries, func(i, j int) bool { return st.recoveries[i] < st.recoveries[j] })
		if n := len(st.recoveries); n > 0 {
			st.RecoveryMedian = st.recoveries[n/2]
			st.RecoveryMax = st.recoveries[n-1]
		}
	}
	return out
}
