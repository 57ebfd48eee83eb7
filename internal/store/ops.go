package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// Maintenance and monitoring statements. Rows whose generated types hold
// only plain Go values are returned as they are (the aliases below); the
// others are converted.

// TopicSettings is what a publish needs of a topic: its partition count,
// record size limit and raw config (JSON).
type TopicSettings = dbsqlc.TopicGetByNameRow

// TopicSettings returns the topic's settings; errs.InvalidName or
// errs.UnknownTopic when there is no such topic.
func (s *Store) TopicSettings(ctx context.Context, exec DBTX, topic string) (*TopicSettings, error) {
	row, err := s.q.TopicGetByName(ctx, s.DB(exec), topic)
	return row, errs.Map(err)
}

// SegmentEnsure creates segments of one partition until two are ahead of
// its end offset, returning how many it created.
func (s *Store) SegmentEnsure(ctx context.Context, exec DBTX, topic string, partition int32) (int32, error) {
	n, err := s.q.SegmentEnsure(ctx, s.DB(exec), dbsqlc.SegmentEnsureParams{Topic: topic, Partition: partition})
	return n, errs.Map(err)
}

// SegmentEnsureMany is SegmentEnsure for several partitions of one topic
// in one transaction (_segments_ahead() says why). It returns, per
// partition, the segments created, or -1 for every partition when the
// topic's table stayed busy past the lock timeout (nothing was created:
// try again later). It takes no counter row: publishers never hold it up.
func (s *Store) SegmentEnsureMany(ctx context.Context, exec DBTX, topic string, partitions []int32) ([]*dbsqlc.SegmentEnsureManyRow, error) {
	rows, err := s.q.SegmentEnsureMany(ctx, s.DB(exec), dbsqlc.SegmentEnsureManyParams{Topic: topic, Partitions: partitions})
	return rows, errs.Map(err)
}

// SegmentsEnsure is SegmentEnsure for every partition of every topic.
func (s *Store) SegmentsEnsure(ctx context.Context, exec DBTX) (int32, error) {
	n, err := s.q.SegmentsEnsure(ctx, s.DB(exec))
	return n, errs.Map(err)
}

// RetentionDrop is one segment retention dropped (or skipped).
type RetentionDrop = dbsqlc.RetentionRunRow

// RetentionRun drops up to maxSegments segments that retention allows.
func (s *Store) RetentionRun(ctx context.Context, exec DBTX, maxSegments int32) ([]*RetentionDrop, error) {
	rows, err := s.q.RetentionRun(ctx, s.DB(exec), maxSegments)
	return rows, errs.Map(err)
}

// ExpiredGroup is a consumer group removed for inactivity.
type ExpiredGroup struct {
	Topic, Group string
	LastActive   time.Time
}

// GroupExpire removes up to maxGroups groups idle longer than their TTL
// (defaultTTL for groups without one of their own).
func (s *Store) GroupExpire(ctx context.Context, exec DBTX, defaultTTL time.Duration, maxGroups int32) ([]ExpiredGroup, error) {
	rows, err := s.q.GroupExpire(ctx, s.DB(exec), dbsqlc.GroupExpireParams{DefaultTtl: interval(defaultTTL), MaxGroups: maxGroups})
	out := make([]ExpiredGroup, len(rows))
	for i, r := range rows {
		out[i] = ExpiredGroup{Topic: r.Topic, Group: r.GroupName, LastActive: r.LastActive.Time}
	}
	return out, errs.Map(err)
}

// MaintenanceEventsPrune deletes up to maxEvents events older than older.
func (s *Store) MaintenanceEventsPrune(ctx context.Context, exec DBTX, older time.Duration, maxEvents int32) (int64, error) {
	n, err := s.q.MaintenanceEventsPrune(ctx, s.DB(exec), dbsqlc.MaintenanceEventsPruneParams{Older: interval(older), MaxEvents: maxEvents})
	return n, errs.Map(err)
}

// MaintenanceLeaderTryLock tries to take the session advisory lock that
// elects the schema's maintenance leader ("pgmsg.maintenance." and the
// schema's name) and reports whether exec's session holds it. exec must
// be a dedicated connection: the lock is held until that connection
// closes, which is the only release.
func (s *Store) MaintenanceLeaderTryLock(ctx context.Context, exec DBTX) (bool, error) {
	ok, err := s.q.MaintenanceLeaderTryLock(ctx, s.DB(exec), "pgmsg.maintenance."+s.schema)
	return ok, errs.Map(err)
}

// ProducerStateExpire deletes up to maxStates idempotent producers' states
// unused for longer than olderThan.
func (s *Store) ProducerStateExpire(ctx context.Context, exec DBTX, olderThan time.Duration, maxStates int32) (int64, error) {
	n, err := s.q.ProducerStateExpire(ctx, s.DB(exec), dbsqlc.ProducerStateExpireParams{OlderThan: interval(olderThan), MaxStates: maxStates})
	return n, errs.Map(err)
}

// TimeIndexRun indexes up to maxRecords records' timestamps every stride
// offsets.
func (s *Store) TimeIndexRun(ctx context.Context, exec DBTX, stride int32, maxRecords int64) (int32, error) {
	n, err := s.q.TimeIndexRun(ctx, s.DB(exec), dbsqlc.TimeIndexRunParams{Stride: stride, MaxRecords: maxRecords})
	return n, errs.Map(err)
}

// Compaction is what compaction removed from one partition.
type Compaction = dbsqlc.CompactRunRow

// CompactRun compacts up to maxPartitions partitions of compacted topics.
func (s *Store) CompactRun(ctx context.Context, exec DBTX, maxPartitions int32) ([]*Compaction, error) {
	rows, err := s.q.CompactRun(ctx, s.DB(exec), maxPartitions)
	return rows, errs.Map(err)
}

// MaintenanceEvent is one logged retention drop, skip, group expiry or
// compaction; Detail is JSON.
type MaintenanceEvent struct {
	ID        int64
	At        time.Time
	Kind      string
	Topic     string
	Group     string
	Partition int32
	Detail    []byte
}

// MaintenanceEvents returns the newest maxEvents events, of one kind
// unless kind is "".
func (s *Store) MaintenanceEvents(ctx context.Context, exec DBTX, kind string, maxEvents int32) ([]MaintenanceEvent, error) {
	params := dbsqlc.MaintenanceEventsParams{MaxEvents: maxEvents}
	if kind != "" {
		params.Kind = pgtype.Text{String: kind, Valid: true}
	}
	rows, err := s.q.MaintenanceEvents(ctx, s.DB(exec), params)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]MaintenanceEvent, len(rows))
	for i, r := range rows {
		out[i] = MaintenanceEvent{ID: r.EventID, At: r.At.Time, Kind: r.Kind, Topic: r.Topic, Group: r.GroupName,
			Partition: r.Partition, Detail: r.Detail}
	}
	return out, nil
}

// PartitionMetrics is one partition's offsets, segment count and bytes.
type PartitionMetrics = dbsqlc.TopicMetricsRow

// TopicMetrics returns every partition's metrics, segment sizes included.
func (s *Store) TopicMetrics(ctx context.Context, exec DBTX) ([]*PartitionMetrics, error) {
	rows, err := s.q.TopicMetrics(ctx, s.DB(exec))
	return rows, errs.Map(err)
}

// PartitionOffsets is one partition's offsets and segment count.
type PartitionOffsets = dbsqlc.TopicOffsetsRow

// TopicOffsets returns every partition's offsets from pgmsg's own tables.
func (s *Store) TopicOffsets(ctx context.Context, exec DBTX) ([]*PartitionOffsets, error) {
	rows, err := s.q.TopicOffsets(ctx, s.DB(exec))
	return rows, errs.Map(err)
}

// GroupPartitionMetrics is one group's cursor and lag on one partition;
// OldestUnconsumed is zero when the group is caught up.
type GroupPartitionMetrics struct {
	Topic, Group     string
	Partition        int32
	NextOffset, Lag  int64
	Skipped          int64
	OldestUnconsumed time.Time
}

// GroupMetrics returns every group's cursor and lag on every partition.
func (s *Store) GroupMetrics(ctx context.Context, exec DBTX) ([]GroupPartitionMetrics, error) {
	rows, err := s.q.GroupMetrics(ctx, s.DB(exec))
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]GroupPartitionMetrics, len(rows))
	for i, r := range rows {
		out[i] = GroupPartitionMetrics{Topic: r.Topic, Group: r.GroupName, Partition: r.Partition, NextOffset: r.NextOffset,
			Lag: r.Lag, Skipped: r.Skipped, OldestUnconsumed: r.OldestUnconsumedAt.Time}
	}
	return out, nil
}

// GroupTotals is one group's lag summed over its partitions;
// OldestUnconsumed is zero when the group is caught up (LogTotalsByID).
type GroupTotals struct {
	Topic, Group     string
	Partitions       int32
	NextOffset, Lag  int64
	Skipped          int64
	OldestUnconsumed time.Time
}

// QueueLatency is one queue's completions and latency quantiles (in
// seconds) over a window.
type QueueLatency = dbsqlc.QueueLatencyRow

// QueueLatency returns every queue's latency over the last window.
func (s *Store) QueueLatency(ctx context.Context, exec DBTX, window time.Duration) ([]*QueueLatency, error) {
	rows, err := s.q.QueueLatency(ctx, s.DB(exec), interval(window))
	return rows, errs.Map(err)
}
