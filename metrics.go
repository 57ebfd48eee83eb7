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
		prow, err := c.queries.TopicMetrics(ctx, c.db(exec))
		if err != nil {
			return mapError(err)
		}
		for _, r := range prow {
			parts = append(parts, PartitionMetrics{Topic: r.Topic, Partition: r.Partition, StartOffset: r.StartOffset,
				EndOffset: r.EndOffset, Segments: int(r.Segments), Bytes: r.Bytes})
		}
		grow, err := c.queries.GroupMetrics(ctx, c.db(exec))
		if err != nil {
			return mapError(err)
		}
		for _, r := range grow {
			groups = append(groups, GroupPartitionMetrics{Topic: r.Topic, Group: r.GroupName, Partition: r.Partition,
				NextOffset: r.NextOffset, Lag: r.Lag, Skipped: r.Skipped, OldestUnconsumed: r.OldestUnconsumedAt.Time})
		}
		return nil
	})
	return parts, groups, err
}
