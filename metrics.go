package pgmsg

import (
	"context"
	"time"
)

// PartitionMetrics is one topic partition's state, for monitoring.
type PartitionMetrics struct {
	Topic       string
	Partition   int32
	StartOffset int64
	EndOffset   int64
	Segments    int
	Bytes       int64
}

// GroupPartitionMetrics is one group's state on one partition.
type GroupPartitionMetrics struct {
	Topic      string
	Group      string
	Partition  int32
	NextOffset int64
	Lag        int64
	Skipped    int64
	// OldestUnconsumed is the timestamp of the oldest record the group has
	// not read; zero when it is caught up.
	OldestUnconsumed time.Time
}

// LogMetrics returns every partition's and every group's state in two
// cheap queries (no record scans: one index probe per lagging group
// partition). pgmsgprom exposes them to Prometheus.
func (c *Client) LogMetrics(ctx context.Context) ([]PartitionMetrics, []GroupPartitionMetrics, error) {
	var parts []PartitionMetrics
	var groups []GroupPartitionMetrics
	err := c.readOnly(ctx, func(exec DBTX) error {
		prow, err := c.store.TopicMetrics(ctx, exec)
		if err != nil {
			return err
		}
		for _, r := range prow {
			parts = append(parts, PartitionMetrics{Topic: r.Topic, Partition: r.Partition, StartOffset: r.StartOffset,
				EndOffset: r.EndOffset, Segments: int(r.Segments), Bytes: r.Bytes})
		}
		grow, err := c.store.GroupMetrics(ctx, exec)
		if err != nil {
			return err
		}
		for _, r := range grow {
			groups = append(groups, GroupPartitionMetrics(r))
		}
		return nil
	})
	return parts, groups, err
}

// TopicTotals is one topic's state summed over its partitions, for
// monitoring.
type TopicTotals struct {
	Topic       string
	Partitions  int32
	StartOffset int64 // sum of the partitions' start offsets
	EndOffset   int64 // sum of the partitions' end offsets: records ever published
	Segments    int
}

// GroupTotals is one group's state summed over its partitions.
type GroupTotals struct {
	Topic      string
	Group      string
	Partitions int32
	NextOffset int64 // sum of the cursors: records consumed
	Lag        int64
	Skipped    int64
	// OldestUnconsumed is the timestamp of the oldest record the group has
	// not read on any partition; zero when it is caught up.
	OldestUnconsumed time.Time
}

// LogTotals returns every topic's and every group's state summed over
// their partitions, from pgmsg's own tables (no file sizes, one index
// probe per lagging group partition). Its answer grows with the number of
// topics and groups, not of partitions and segments: pgmsgprom exposes
// these by default, and LogMetrics's per-partition figures only when asked.
//
// The client keeps the last answer and, on the next call, reads again only
// the topics and groups whose rows were written since (found by a scan of
// topic, topic_partition, segment and group_cursor for rows of newer
// transactions), so that the scrapes and dashboard refreshes of an estate
// in which little changes cost milliseconds, not the aggregates over every
// partition. A deletion (which leaves no written row) shows in the tables'
// row counts and makes it read everything again, as it does every 5
// minutes whatever changed. The answer is what a read at the call's
// snapshot would give, but for a record deleted under a group's cursor
// (compaction) since the last full read: OldestUnconsumed may then be up to
// 5 minutes old. Calls are serialised per client.
func (c *Client) LogTotals(ctx context.Context) ([]TopicTotals, []GroupTotals, error) {
	tc := &c.totals
	tc.mu.Lock()
	defer tc.mu.Unlock()
	err := c.readOnly(ctx, func(exec DBTX) error { return c.updateTotals(ctx, exec, tc) })
	if err != nil {
		tc.valid = false
		return nil, nil, err
	}
	topics, groups := tc.answer()
	if topics == nil {
		topics = []TopicTotals{}
	}
	if groups == nil {
		groups = []GroupTotals{}
	}
	return topics, groups, nil
}

// TopicOffsets is the partitions' half of LogMetrics without the
// segments' sizes (PartitionMetrics.Bytes is zero): offsets and segment
// counts from pgmsg's own tables, one query. LogMetrics asks PostgreSQL
// for the size of every segment's files and plans a probe of the record
// table across all its partitions; for 1,000 topics that took 9 to 21 s on
// a busy server, where this takes milliseconds: for pages that refresh
// every few seconds. ListGroups has the groups' cursors and lag.
func (c *Client) TopicOffsets(ctx context.Context) ([]PartitionMetrics, error) {
	rows, err := c.store.TopicOffsets(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	parts := make([]PartitionMetrics, len(rows))
	for i, r := range rows {
		parts[i] = PartitionMetrics{Topic: r.Topic, Partition: r.Partition, StartOffset: r.StartOffset,
			EndOffset: r.EndOffset, Segments: int(r.Segments)}
	}
	return parts, nil
}

// QueueLatencyMetrics summarises the jobs one queue finished in a recent
// window (see [Client.QueueLatency]). The durations are zero when Completed
// is zero.
type QueueLatencyMetrics struct {
	Queue     string
	Window    time.Duration
	Completed int64 // jobs archived as completed in the window
	Cancelled int64 // jobs archived as cancelled in the window
	// LatencyP50, LatencyP99 and LatencyMax are quantiles of enqueue to
	// completion: waiting, scheduled delay, retries and running included.
	LatencyP50, LatencyP99, LatencyMax time.Duration
	// RunP50 and RunP99 are quantiles of the last attempt's run time
	// (claim to completion).
	RunP50, RunP99 time.Duration
}

// QueueLatencyWindowDefault is the window QueueLatency uses for zero.
const QueueLatencyWindowDefault = time.Minute

// QueueLatency returns, for every queue, how many jobs completed and were
// cancelled within the last window (zero: QueueLatencyWindowDefault, at
// most a day) and quantiles of their latency, from the archive (SQL
// queue_latency). Its cost is one index range scan of the window per queue.
// Dead-lettered jobs are counted by [Client.QueueStats]. pgmsgprom exposes
// these to Prometheus.
func (c *Client) QueueLatency(ctx context.Context, window time.Duration) ([]QueueLatencyMetrics, error) {
	if window == 0 {
		window = QueueLatencyWindowDefault
	}
	// queue_latency checks the window (PM004, ErrInvalidArgument).
	rows, err := c.store.QueueLatency(ctx, c.pool, window)
	if err != nil {
		return nil, err
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	out := make([]QueueLatencyMetrics, 0, len(rows))
	for _, r := range rows {
		out = append(out, QueueLatencyMetrics{Queue: r.Queue, Window: window, Completed: r.Completed, Cancelled: r.Cancelled,
			LatencyP50: sec(r.LatencyP50), LatencyP99: sec(r.LatencyP99), LatencyMax: sec(r.LatencyMax),
			RunP50: sec(r.RunP50), RunP99: sec(r.RunP99)})
	}
	return out, nil
}
