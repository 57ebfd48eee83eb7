// Package pgmsgprom exposes pgmsg's state to Prometheus: per-topic offsets
// and segments, per-group lag, skips and oldest unconsumed age (summed over
// partitions; per-partition series and segment sizes with
// Opts.PerPartition), queue depth by state, and maintenance task outcomes. It lives outside the pgmsg
// package so the library itself does not depend on Prometheus.
//
//	reg.MustRegister(pgmsgprom.NewCollector(client, nil))
//
// Values are read at scrape time with a few queries (primary-key rows,
// catalog sizes, queue counts). Set Opts.CacheTTL to serve scrapes from the
// last figures for a while: concurrent scrapes always share one collection,
// and with a TTL a scrape loop costs the database at most one collection
// per TTL.
package pgmsgprom

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgmsg/pgmsg"
)

// Opts configure a Collector; nil means defaults.
type Opts struct {
	// Timeout bounds the queries of one scrape. Default 5s.
	Timeout time.Duration
	// Namespace prefixes every metric. Default "pgmsg".
	Namespace string
	// CacheTTL is how long collected figures are served to later scrapes
	// before the database is asked again. Scrapes that arrive while a
	// collection runs wait for it and share its figures, whatever the TTL.
	// Default 0: every scrape that does not overlap another collects.
	CacheTTL time.Duration
	// PerPartition adds the per-partition series (pgmsg_partition_* with
	// segment sizes, pgmsg_group_* by partition), as Kafka exporters do
	// behind an option. Their cost and size grow with partitions and
	// segments: 10,000 topics of 4 partitions are 40,000 series of each,
	// and the sizes are a file-system call per segment. The topic and
	// group totals (pgmsg_topic_*, pgmsg_group_*_sum) are always exposed,
	// from two aggregate queries, and are what lag alerts should use.
	PerPartition bool
}

// Collector is a prometheus.Collector for one pgmsg client's schema.
type Collector struct {
	client   *pgmsg.Client
	timeout  time.Duration
	cacheTTL time.Duration
	perPart  bool

	topicEnd, topicStart, topicParts, topicSegments *prometheus.Desc
	groupNextSum, groupLagSum, groupSkippedSum      *prometheus.Desc
	groupAgeMax                                     *prometheus.Desc

	partEnd, partStart, partSegments, partBytes *prometheus.Desc
	groupNext, groupLag, groupSkipped, groupAge *prometheus.Desc
	queueJobs, queueOldest, queueThroughput     *prometheus.Desc
	queueFinished, queueLatency, queueRun       *prometheus.Desc
	replicaReads, replicaRecords                *prometheus.Desc
	replicaFallbacks, replicaLag, replicaUp     *prometheus.Desc
	replicaPrimaryReads                         *prometheus.Desc
	scrapeErrors                                prometheus.Counter
	collections                                 prometheus.Counter

	// snapMu guards snap (the last figures) and pending (the collection
	// running, nil if none).
	snapMu  sync.Mutex
	snap    *snapshot
	pending *collection

	taskSeconds *prometheus.HistogramVec
	taskItems   *prometheus.CounterVec
	taskErrors  *prometheus.CounterVec

	// seriesMu guards series: the metric last sent for each series with its
	// value, sent again while the value stays (an idle estate's 10,000
	// topics and groups are 80,000 series whose values do not change
	// between scrapes: building them anew was a third of a scrape's CPU);
	// gen counts Collect calls, to forget series no longer collected.
	seriesMu sync.Mutex
	series   map[seriesKey]*seriesMetric
	gen      uint64
	// totals are the topic and group totals' metrics of the last Collect
	// and the figures they were built from: while LogTotals answers the
	// same (it keeps its answer while nothing is written), they are sent
	// again as they are, without a lookup per series (at 10,000 topics
	// and groups, 80,000 map lookups were a third of a scrape's CPU); only
	// the ages of lagging groups, which grow with the clock, are built
	// anew (agedAt: the index in gtotal of each).
	totals       []prometheus.Metric
	totalsTopics []pgmsg.TopicTotals
	totalsGroups []pgmsg.GroupTotals
	agedAt       []int

	// help is each Desc's name and help text, for the totals that Handler
	// writes itself. rendered: a Handler writes the totals, and Collect
	// leaves them out and keeps the figures it read (last, lastAt) for it.
	help     map[*prometheus.Desc][2]string
	rendered bool
	last     *snapshot
	lastAt   time.Time
}

// seriesKey names one series: its Desc and up to three label values.
type seriesKey struct {
	d       *prometheus.Desc
	a, b, c string
}

// seriesMetric is the metric last sent for a series.
type seriesMetric struct {
	t   prometheus.ValueType
	v   float64
	m   prometheus.Metric
	gen uint64
}

// NewCollector returns a collector reading through client.
func NewCollector(client *pgmsg.Client, opts *Opts) *Collector {
	o := Opts{}
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Namespace == "" {
		o.Namespace = "pgmsg"
	}
	ns := o.Namespace
	help := map[*prometheus.Desc][2]string{}
	d := func(name, h string, labels ...string) *prometheus.Desc {
		desc := prometheus.NewDesc(ns+"_"+name, h, labels, nil)
		help[desc] = [2]string{ns + "_" + name, h}
		return desc
	}
	return &Collector{
		help:            help,
		client:          client,
		timeout:         o.Timeout,
		cacheTTL:        o.CacheTTL,
		perPart:         o.PerPartition,
		topicEnd:        d("topic_end_offset", "Sum of the topic's partitions' next offsets: records ever published to it (use rate()).", "topic"),
		topicStart:      d("topic_start_offset", "Sum of the topic's partitions' lowest stored offsets (raised by retention); end minus start is the records stored.", "topic"),
		topicParts:      d("topic_partitions", "Partitions of the topic.", "topic"),
		topicSegments:   d("topic_segments", "Segments (range partitions) holding the topic's records.", "topic"),
		groupNextSum:    d("group_next_offset_sum", "Sum of the group's cursors over the topic's partitions: records consumed and committed (use rate()).", "topic", "group"),
		groupLagSum:     d("group_lag_records_sum", "Records published but not yet committed by the group, over all partitions.", "topic", "group"),
		groupSkippedSum: d("group_skipped_records_sum", "Records the group never read because the topic's hard retention limit dropped them, over all partitions (only grows).", "topic", "group"),
		groupAgeMax:     d("group_oldest_unconsumed_age_seconds_max", "Age of the oldest record the group has not committed on any partition (0 when caught up).", "topic", "group"),
		partEnd:         d("partition_end_offset", "Next offset to be written: records ever published to the partition (use rate()).", "topic", "partition"),
		partStart:       d("partition_start_offset", "Lowest offset still stored (raised by retention).", "topic", "partition"),
		partSegments:    d("partition_segments", "Segments (range partitions) holding the partition's records.", "topic", "partition"),
		partBytes:       d("partition_bytes", "On-disk bytes of the partition's segments, indexes included.", "topic", "partition"),
		groupNext:       d("group_next_offset", "Group cursor: records consumed and committed (use rate()).", "topic", "group", "partition"),
		groupLag:        d("group_lag_records", "Records published but not yet committed by the group.", "topic", "group", "partition"),
		groupSkipped:    d("group_skipped_records_total", "Records the group never read because the topic's hard retention limit dropped them.", "topic", "group", "partition"),
		groupAge:        d("group_oldest_unconsumed_age_seconds", "Age of the oldest record the group has not committed (0 when caught up).", "topic", "group", "partition"),
		queueJobs:       d("queue_jobs", "Jobs by state.", "queue", "state"),
		queueOldest:     d("queue_oldest_available_age_seconds", "How long the oldest available job has waited.", "queue"),
		queueThroughput: d("queue_completed_per_second", "Jobs archived per second over the last minute.", "queue"),
		queueFinished:   d("queue_jobs_finished_last_minute", "Jobs archived in the last minute, by outcome (completed, cancelled); dead-lettered jobs are queue_jobs{state=\"dead\"}.", "queue", "outcome"),
		queueLatency:    d("queue_job_latency_seconds", "Enqueue-to-completion latency of the jobs completed in the last minute (waiting, delay and retries included), by quantile.", "queue", "quantile"),
		queueRun:        d("queue_job_run_seconds", "Run time of the last attempt of the jobs completed in the last minute, by quantile.", "queue", "quantile"),
		replicaReads:    d("replica_reads_total", "Claims whose records this read replica served.", "replica"),
		replicaRecords:  d("replica_records_total", "Records this read replica served.", "replica"),
		replicaFallbacks: d("replica_fallbacks_total", "Claims this read replica could not serve in time (lagging, failed, promoted): the primary read them.",
			"replica"),
		replicaLag:          d("replica_lag_bytes", "How far the read replica's replay was behind a claim's position when last measured.", "replica"),
		replicaUp:           d("replica_healthy", "1 while the read replica is used, 0 while it is skipped after a fallback.", "replica"),
		replicaPrimaryReads: d("replica_primary_reads_total", "Claims read on the primary although read replicas are configured."),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "scrape_errors_total",
			Help: "Collections whose pgmsg queries failed."}),
		collections: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "scrape_collections_total",
			Help: "Collections of pgmsg state from the database (scrapes served from the cache, or sharing a collection, do not count)."}),
		taskSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "maintenance_task_duration_seconds",
			Help: "Duration of maintenance tasks.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)}, []string{"task"}),
		taskItems: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "maintenance_task_items_total",
			Help: "Items handled by maintenance tasks (log.retention: segments dropped; log.group_expiry: groups expired; queue.rescue: jobs rescued ...)."}, []string{"task"}),
		taskErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "maintenance_task_errors_total",
			Help: "Maintenance task runs that failed."}, []string{"task"}),
	}
}

// ObserveMaintenance records a maintenance run; pass it as
// MaintenanceConfig.OnRun.
func (c *Collector) ObserveMaintenance(res *pgmsg.MaintenanceResult) {
	for name, t := range res.Tasks {
		c.taskSeconds.WithLabelValues(name).Observe(t.Duration.Seconds())
		c.taskItems.WithLabelValues(name).Add(float64(t.Items))
		if t.Error != "" {
			c.taskErrors.WithLabelValues(name).Inc()
		}
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.topicEnd, c.topicStart, c.topicParts, c.topicSegments, c.groupNextSum,
		c.groupLagSum, c.groupSkippedSum, c.groupAgeMax, c.partEnd, c.partStart, c.partSegments, c.partBytes, c.groupNext, c.groupLag,
		c.groupSkipped, c.groupAge, c.queueJobs, c.queueOldest, c.queueThroughput, c.queueFinished, c.queueLatency, c.queueRun,
		c.replicaReads, c.replicaRecords, c.replicaFallbacks, c.replicaLag, c.replicaUp, c.replicaPrimaryReads} {
		ch <- d
	}
	c.scrapeErrors.Describe(ch)
	c.collections.Describe(ch)
	c.taskSeconds.Describe(ch)
	c.taskItems.Describe(ch)
	c.taskErrors.Describe(ch)
}

// snapshot is the figures of one collection.
type snapshot struct {
	at     time.Time
	topics []pgmsg.TopicTotals
	gtotal []pgmsg.GroupTotals
	parts  []pgmsg.PartitionMetrics
	groups []pgmsg.GroupPartitionMetrics
	stats  []*pgmsg.QueueStats
	lat    []pgmsg.QueueLatencyMetrics
}

// collection is a collection in progress; done closes when snap is set.
type collection struct {
	done chan struct{}
	snap *snapshot
}

// figures returns the cached figures if younger than the TTL, else those of
// the collection running, else those of a new collection.
func (c *Collector) figures() *snapshot {
	c.snapMu.Lock()
	if c.snap != nil && time.Since(c.snap.at) < c.cacheTTL {
		s := c.snap
		c.snapMu.Unlock()
		return s
	}
	if p := c.pending; p != nil {
		c.snapMu.Unlock()
		<-p.done
		return p.snap
	}
	p := &collection{done: make(chan struct{})}
	c.pending = p
	c.snapMu.Unlock()
	defer func() {
		c.snapMu.Lock()
		c.snap, c.pending = p.snap, nil
		c.snapMu.Unlock()
		close(p.done)
	}()
	p.snap = c.collect()
	return p.snap
}

// collect reads the figures from the database.
func (c *Collector) collect() *snapshot {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.collections.Inc()
	s := &snapshot{}
	var err error
	if s.topics, s.gtotal, err = c.client.LogTotals(ctx); err != nil {
		c.scrapeErrors.Inc()
	}
	if c.perPart {
		if s.parts, s.groups, err = c.client.LogMetrics(ctx); err != nil {
			c.scrapeErrors.Inc()
		}
	}
	if s.stats, err = c.client.AllQueueStats(ctx); err != nil {
		c.scrapeErrors.Inc()
	}
	if s.lat, err = c.client.QueueLatency(ctx, time.Minute); err != nil {
		c.scrapeErrors.Inc()
	}
	s.at = time.Now()
	return s
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.seriesMu.Lock()
	defer c.seriesMu.Unlock()
	if c.series == nil {
		c.series = map[seriesKey]*seriesMetric{}
	}
	c.gen++
	sent := 0
	send := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		k := seriesKey{d: d}
		switch len(labels) {
		case 3:
			k.c = labels[2]
			fallthrough
		case 2:
			k.b = labels[1]
			fallthrough
		case 1:
			k.a = labels[0]
		}
		sm := c.series[k]
		if sm == nil || sm.t != t || sm.v != v || len(labels) > 3 {
			sm = &seriesMetric{t: t, v: v, m: prometheus.MustNewConstMetric(d, t, v, labels...)}
			if len(labels) <= 3 {
				c.series[k] = sm
			}
		}
		sm.gen = c.gen
		sent++
		ch <- sm.m
	}
	defer func() {
		if len(c.series) > sent {
			for k, sm := range c.series {
				if sm.gen != c.gen {
					delete(c.series, k)
				}
			}
		}
	}()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) { send(d, prometheus.GaugeValue, v, labels...) }
	counter := func(d *prometheus.Desc, v float64, labels ...string) { send(d, prometheus.CounterValue, v, labels...) }
	// Read replicas: the client's own counters, not the database's.
	if rs := c.client.ReplicaStats(); rs != nil {
		for _, r := range rs.Replicas {
			counter(c.replicaReads, float64(r.Reads), r.Replica)
			counter(c.replicaRecords, float64(r.Records), r.Replica)
			counter(c.replicaFallbacks, float64(r.Fallbacks), r.Replica)
			gauge(c.replicaLag, float64(r.LagBytes), r.Replica)
			up := 0.0
			if r.Healthy {
				up = 1
			}
			gauge(c.replicaUp, up, r.Replica)
		}
		counter(c.replicaPrimaryReads, float64(rs.PrimaryReads))
	}
	snap := c.figures()
	if snap == nil {
		snap = &snapshot{} // the collection panicked
	}
	now := time.Now()
	if c.rendered {
		c.last, c.lastAt = snap, now
	} else {
		c.collectTotals(ch, snap, now)
	}
	for _, p := range snap.parts {
		ps := strconv.Itoa(int(p.Partition))
		gauge(c.partEnd, float64(p.EndOffset), p.Topic, ps)
		gauge(c.partStart, float64(p.StartOffset), p.Topic, ps)
		gauge(c.partSegments, float64(p.Segments), p.Topic, ps)
		gauge(c.partBytes, float64(p.Bytes), p.Topic, ps)
	}
	for _, g := range snap.groups {
		ps := strconv.Itoa(int(g.Partition))
		gauge(c.groupNext, float64(g.NextOffset), g.Topic, g.Group, ps)
		gauge(c.groupLag, float64(g.Lag), g.Topic, g.Group, ps)
		counter(c.groupSkipped, float64(g.Skipped), g.Topic, g.Group, ps)
		age := 0.0
		if !g.OldestUnconsumed.IsZero() {
			age = max(now.Sub(g.OldestUnconsumed).Seconds(), 0)
		}
		gauge(c.groupAge, age, g.Topic, g.Group, ps)
	}
	for _, s := range snap.stats {
		for state, n := range map[string]int64{"available": s.Available, "scheduled": s.Scheduled, "running": s.Running,
			"retrying": s.Retrying, "dead": s.Dead, "archived": s.Archived} {
			gauge(c.queueJobs, float64(n), s.Queue, state)
		}
		gauge(c.queueOldest, s.OldestAvailableAge.Seconds(), s.Queue)
		gauge(c.queueThroughput, s.Throughput, s.Queue)
	}
	for _, l := range snap.lat {
		gauge(c.queueFinished, float64(l.Completed), l.Queue, "completed")
		gauge(c.queueFinished, float64(l.Cancelled), l.Queue, "cancelled")
		if l.Completed == 0 {
			continue // no quantiles without jobs
		}
		for q, v := range map[string]time.Duration{"0.5": l.LatencyP50, "0.99": l.LatencyP99, "1": l.LatencyMax} {
			gauge(c.queueLatency, v.Seconds(), l.Queue, q)
		}
		gauge(c.queueRun, l.RunP50.Seconds(), l.Queue, "0.5")
		gauge(c.queueRun, l.RunP99.Seconds(), l.Queue, "0.99")
	}
	c.collections.Collect(ch)
	c.scrapeErrors.Collect(ch)
	c.taskSeconds.Collect(ch)
	c.taskItems.Collect(ch)
	c.taskErrors.Collect(ch)
}

// collectTotals sends the topic and group totals' series: the metrics of
// the last call again when the figures are the same, else new ones (kept
// for the next call). Called with seriesMu held.
func (c *Collector) collectTotals(ch chan<- prometheus.Metric, snap *snapshot, now time.Time) {
	age := func(g pgmsg.GroupTotals) prometheus.Metric {
		a := 0.0
		if !g.OldestUnconsumed.IsZero() {
			a = max(now.Sub(g.OldestUnconsumed).Seconds(), 0)
		}
		return prometheus.MustNewConstMetric(c.groupAgeMax, prometheus.GaugeValue, a, g.Topic, g.Group)
	}
	if c.totals == nil || !slices.Equal(c.totalsTopics, snap.topics) || !slices.Equal(c.totalsGroups, snap.gtotal) {
		ms := make([]prometheus.Metric, 0, 4*(len(snap.topics)+len(snap.gtotal)))
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ms = append(ms, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
		}
		c.agedAt = c.agedAt[:0]
		for _, t := range snap.topics {
			gauge(c.topicEnd, float64(t.EndOffset), t.Topic)
			gauge(c.topicStart, float64(t.StartOffset), t.Topic)
			gauge(c.topicParts, float64(t.Partitions), t.Topic)
			gauge(c.topicSegments, float64(t.Segments), t.Topic)
		}
		for i, g := range snap.gtotal {
			gauge(c.groupNextSum, float64(g.NextOffset), g.Topic, g.Group)
			gauge(c.groupLagSum, float64(g.Lag), g.Topic, g.Group)
			gauge(c.groupSkippedSum, float64(g.Skipped), g.Topic, g.Group)
			if !g.OldestUnconsumed.IsZero() {
				c.agedAt = append(c.agedAt, i)
				continue // built on each call
			}
			ms = append(ms, age(g))
		}
		c.totals, c.totalsTopics, c.totalsGroups = ms, snap.topics, snap.gtotal
	}
	for _, m := range c.totals {
		ch <- m
	}
	for _, i := range c.agedAt {
		ch <- age(c.totalsGroups[i])
	}
}
