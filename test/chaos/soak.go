package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SoakOptions size a soak run: a calibration phase that measures the
// maximum publish rate of the producers, then Duration at Load (0.7) of it
// with consumers, an enqueuer and workers running, sampled every Sample.
type SoakOptions struct {
	Calibrate time.Duration
	Duration  time.Duration
	Sample    time.Duration
	Load      float64
	Producers int
	Batch     int
	Logf      func(format string, args ...any)
}

// SoakSample is one observation.
type SoakSample struct {
	At          time.Duration `json:"at"`
	Published   int64         `json:"published"`    // records in the log
	PubRate     float64       `json:"pub_rate"`     // records/s since the previous sample
	Consumed    int64         `json:"consumed"`     // records committed by group g-run
	Lag         int64         `json:"lag"`          // g-run records not yet committed
	JobsDone    int64         `json:"jobs_done"`    // archived jobs
	JobRate     float64       `json:"job_rate"`     // jobs/s since the previous sample
	JobsLive    int64         `json:"jobs_live"`    // waiting or running jobs
	RSSKiB      int64         `json:"rss_kib"`      // sum of the agents' resident memory
	MaxRSSKiB   int64         `json:"max_rss_kib"`  // largest single agent
	Conns       int64         `json:"conns"`        // server connections
	JobBytes    int64         `json:"job_bytes"`    // job table + indexes
	CursorBytes int64         `json:"cursor_bytes"` // group_cursor + topic_partition + indexes
	ArchBytes   int64         `json:"archive_bytes"`
	LogBytes    int64         `json:"log_bytes"` // record segments
}

// SoakResult is a soak run's outcome.
type SoakResult struct {
	MaxRate       float64      `json:"max_rate"`
	TargetRate    float64      `json:"target_rate"`
	MaxJobRate    float64      `json:"max_job_rate"`
	TargetJobRate float64      `json:"target_job_rate"`
	Samples       []SoakSample `json:"samples"`
	Report        *Report      `json:"report"`
	Dir           string       `json:"dir"`
}

// Soak runs a soak test and returns its samples and the invariant check
// of its history.
func Soak(ctx context.Context, so SoakOptions) (res *SoakResult, err error) {
	if so.Load == 0 {
		so.Load = 0.7
	}
	if so.Producers == 0 {
		so.Producers = 2
	}
	if so.Batch == 0 {
		so.Batch = 100
	}
	if so.Sample == 0 {
		so.Sample = 5 * time.Second
	}
	if so.Logf == nil {
		so.Logf = func(string, ...any) {}
	}
	o := Options{Partitions: 4, SegmentRecords: 1 << 16, Lease: 10 * time.Second, DrainTimeout: 3 * time.Minute, Logf: so.Logf}
	o.defaults()
	h := &Harness{o: o}
	if h.dir, err = os.MkdirTemp("", "pgmsg-soak-"); err != nil {
		return nil, err
	}
	if err := os.Chmod(h.dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		h.shutdown()
		if err == nil && res != nil && res.Report.OK() {
			os.RemoveAll(h.dir)
		}
	}()
	h.hist = filepath.Join(h.dir, "history")
	for _, d := range []string{h.hist, filepath.Join(h.dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := h.build(ctx); err != nil {
		return nil, err
	}
	if err := h.startServer(ctx); err != nil {
		return nil, err
	}
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	// Only g-run is read during a soak.
	if _, err := h.admin.Exec(ctx, `SELECT pgmsg.group_delete($1, $2), pgmsg.group_delete($1, $3), pgmsg.group_delete($1, $4)`,
		topicName, groupTx, groupHTTP, groupRun2); err != nil {
		return nil, err
	}
	res = &SoakResult{Dir: h.dir}
	batch := strconv.Itoa(so.Batch)

	// Calibration: producers publish back to back (rate far above what
	// they can do), consumers read along.
	add := func(role string, n int, args ...string) []*slot {
		var out []*slot
		for range n {
			s := &slot{role: role, idx: len(h.slots), args: args}
			h.slots = append(h.slots, s)
			out = append(out, s)
			h.start(s)
		}
		return out
	}
	add("consumer", 2, "-group", groupRun, "-lease", "10s", "-work", "0s", "-release", "0")
	add("worker", 2, "-lease", "10s", "-work", "0s", "-flaky", "0", "-poison", "0")
	cal := add("producer", so.Producers, "-rate", "100000000", "-batch", batch)
	cal = append(cal, add("enqueuer", 1, "-rate", "100000000", "-batch", "100", "-poison", "0")...)
	time.Sleep(3 * time.Second) // connect, warm up
	s0, err := h.sample(ctx)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	time.Sleep(so.Calibrate)
	s1, err := h.sample(ctx)
	if err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	// The end-to-end maximum: what the producers can publish AND the group
	// can consume; and what the workers can complete.
	pubMax := float64(s1.Published-s0.Published) / secs
	conMax := float64(s1.Consumed-s0.Consumed) / secs
	res.MaxRate = min(pubMax, conMax)
	res.MaxJobRate = float64(s1.JobsDone-s0.JobsDone) / secs
	for _, s := range cal {
		h.signal(s, 15, true)
		<-s.done
	}
	res.TargetRate = res.MaxRate * so.Load
	res.TargetJobRate = res.MaxJobRate * so.Load
	per := max(int(res.TargetRate)/so.Producers, 1)
	so.Logf("soak: calibration over %s: publish %.0f records/s, consume %.0f records/s, %.0f jobs/s; soaking at %.0f records/s (%d per producer) and %.0f jobs/s for %s",
		so.Calibrate, pubMax, conMax, res.MaxJobRate, res.TargetRate, per, res.TargetJobRate, so.Duration)
	// Let the group and the workers catch up with the calibration backlog.
	for ctx.Err() == nil {
		s, err := h.sample(ctx)
		if err != nil {
			return nil, err
		}
		if s.Lag < int64(res.TargetRate) && s.JobsLive < int64(res.TargetJobRate)+100 {
			break
		}
		time.Sleep(time.Second)
	}
	add("producer", so.Producers, "-rate", strconv.Itoa(per), "-batch", batch)
	add("enqueuer", 1, "-rate", strconv.Itoa(max(int(res.TargetJobRate), 10)), "-batch", "10", "-poison", "0")

	start := time.Now()
	var prev SoakSample
	for time.Since(start) < so.Duration && ctx.Err() == nil {
		time.Sleep(so.Sample)
		s, err := h.sample(ctx)
		if err != nil {
			return nil, err
		}
		s.At = time.Since(start).Round(time.Second)
		if prev.At != 0 || len(res.Samples) > 0 {
			dt := (s.At - prev.At).Seconds()
			s.PubRate = float64(s.Published-prev.Published) / dt
			s.JobRate = float64(s.JobsDone-prev.JobsDone) / dt
		}
		res.Samples = append(res.Samples, s)
		prev = s
		so.Logf("soak: %s", s.String())
	}
	h.stopAll(map[string]bool{"producer": true, "enqueuer": true})
	if err := h.drain(ctx); err != nil {
		so.Logf("soak: drain: %v", err)
	}
	h.stopAll(nil)
	// A soak stores millions of records: check with SQL and by streaming
	// the histories (the chaos runs do the record-by-record check).
	if res.Report, err = h.soakCheck(ctx); err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	_ = os.WriteFile(filepath.Join(h.dir, "soak.json"), b, 0o644)
	return res, nil
}

// soakCheck verifies, without loading the log: offsets gapless per
// partition, no record stored twice, g-run at the end of every partition,
// every acknowledged publish and enqueue accounted for, no job left.
func (h *Harness) soakCheck(ctx context.Context) (*Report, error) {
	r := &Report{Groups: map[string]*GroupStats{}}
	acks := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(h.hist, "*.jsonl"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			for _, k := range []string{"pub", "enq", "jdone", "commit", "recv"} {
				if bytes.Contains(line, []byte(`"k":"`+k+`"`)) {
					acks[k]++
				}
			}
		}
		fh.Close()
	}
	r.Published, r.Enqueued, r.JobsCompleted = acks["pub"], acks["enq"], acks["jdone"]
	r.SoakDelivered, r.SoakCommits = acks["recv"], acks["commit"]
	rows, err := h.admin.Query(ctx, `
		SELECT tp.partition, tp.start_offset, tp.next_offset, count(r."offset"), coalesce(min(r."offset"), -1), coalesce(max(r."offset"), -1),
		       count(DISTINCT r.value)
		FROM pgmsg.topic_partition tp LEFT JOIN pgmsg.record r USING (topic_id, partition)
		GROUP BY 1, 2, 3 ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var p int32
		var start, next, n, lo, hi, distinct int64
		if err := rows.Scan(&p, &start, &next, &n, &lo, &hi, &distinct); err != nil {
			return nil, err
		}
		r.LogRecords += int(n)
		if n != next-start || (n > 0 && (lo != start || hi != next-1)) {
			r.violate("offset-gap", "partition %d: %d records in [%d, %d], counter [%d, %d)", p, n, lo, hi, start, next)
		}
		if distinct != n {
			r.LogDuplicates += int(n - distinct)
			r.violate("log-duplicate", "partition %d: %d records, %d distinct", p, n, distinct)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if r.LogRecords < r.Published {
		r.Lost = r.Published - r.LogRecords
		r.violate("pub-lost", "%d publishes acknowledged, %d records stored", r.Published, r.LogRecords)
	}
	behind, err := h.count(ctx, `SELECT count(*) FROM pgmsg.group_cursor c JOIN pgmsg.topic_partition tp USING (topic_id, partition)
		WHERE c.next_offset <> tp.next_offset`)
	if err != nil {
		return nil, err
	}
	if behind > 0 {
		r.violate("not-drained", "%d cursors not at the end", behind)
	}
	live, err := h.count(ctx, `SELECT count(*) FROM pgmsg.job`)
	if err != nil {
		return nil, err
	}
	archived, err := h.count(ctx, `SELECT count(*) FROM pgmsg.job_archive WHERE status = 'completed'`)
	if err != nil {
		return nil, err
	}
	r.JobsUnfinished = int(live)
	if live > 0 {
		r.violate("job-unfinished", "%d jobs left (no poison jobs in a soak)", live)
	}
	if int(archived) < r.Enqueued {
		r.JobsLost = r.Enqueued - int(archived)
		r.violate("job-lost", "%d enqueues acknowledged, %d archived", r.Enqueued, archived)
	}
	if r.JobsCompleted > int(archived) {
		r.violate("job-done-lost", "%d completions acknowledged, %d archived", r.JobsCompleted, archived)
	}
	return r, nil
}

func (h *Harness) count(ctx context.Context, q string) (int64, error) {
	var n int64
	err := h.admin.QueryRow(ctx, q).Scan(&n)
	return n, err
}

func (h *Harness) sample(ctx context.Context) (SoakSample, error) {
	var s SoakSample
	err := h.admin.QueryRow(ctx, `
		SELECT (SELECT coalesce(sum(next_offset), 0) FROM pgmsg.topic_partition),
		       (SELECT coalesce(sum(next_offset), 0) FROM pgmsg.group_cursor WHERE group_name = $1),
		       (SELECT count(*) FROM pgmsg.job_archive),
		       (SELECT count(*) FROM pgmsg.job WHERE state <> 'dead'),
		       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
		       pg_total_relation_size('pgmsg.job'),
		       pg_total_relation_size('pgmsg.group_cursor') + pg_total_relation_size('pgmsg.topic_partition'),
		       pg_total_relation_size('pgmsg.job_archive'),
		       (SELECT coalesce(sum(pg_total_relation_size(format('pgmsg.%I', relname)::regclass)), 0) FROM pgmsg.segment)::bigint`,
		groupRun).Scan(&s.Published, &s.Consumed, &s.JobsDone, &s.JobsLive, &s.Conns, &s.JobBytes, &s.CursorBytes, &s.ArchBytes, &s.LogBytes)
	if err != nil {
		return s, err
	}
	s.Lag = s.Published - s.Consumed
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sl := range h.slots {
		if sl.cmd == nil || sl.cmd.Process == nil {
			continue
		}
		select {
		case <-sl.done:
			continue // exited
		default:
		}
		kib := rssKiB(sl.cmd.Process.Pid)
		s.RSSKiB += kib
		s.MaxRSSKiB = max(s.MaxRSSKiB, kib)
	}
	return s, nil
}

func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

func (s SoakSample) String() string {
	return fmt.Sprintf("t=%-5s published %d (%.0f/s) lag %d jobs %d (%.0f/s, %d live) rss %d KiB (max agent %d) conns %d job %d KiB cursors %d KiB archive %d KiB log %d KiB",
		s.At, s.Published, s.PubRate, s.Lag, s.JobsDone, s.JobRate, s.JobsLive, s.RSSKiB, s.MaxRSSKiB, s.Conns,
		s.JobBytes>>10, s.CursorBytes>>10, s.ArchBytes>>10, s.LogBytes>>10)
}
