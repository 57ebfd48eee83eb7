package store

import (
	"context"
	"time"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// Topic is a row of the topic table.
type Topic struct {
	Name           string
	Partitions     int32
	SegmentRecords int64
	MaxRecordBytes int32
	// Config is the topic's settings, a JSON object.
	Config    []byte
	CreatedAt time.Time
}

// TopicCreate creates a topic with config, a JSON object of settings
// (topic_create()).
func (s *Store) TopicCreate(ctx context.Context, exec DBTX, name string, partitions int32, config []byte) (*Topic, error) {
	r, err := s.q.TopicCreate(ctx, s.DB(exec), dbsqlc.TopicCreateParams{Name: name, Partitions: partitions, Config: config})
	if err != nil {
		return nil, errs.Map(err)
	}
	return &Topic{Name: r.Name, Partitions: r.Partitions, SegmentRecords: r.SegmentRecords, MaxRecordBytes: r.MaxRecordBytes,
		Config: r.Config, CreatedAt: r.CreatedAt.Time}, nil
}

// TopicList returns every topic, by name.
func (s *Store) TopicList(ctx context.Context, exec DBTX) ([]Topic, error) {
	rows, err := s.q.TopicList(ctx, s.DB(exec))
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]Topic, len(rows))
	for i, r := range rows {
		out[i] = Topic{Name: r.Name, Partitions: r.Partitions, SegmentRecords: r.SegmentRecords, MaxRecordBytes: r.MaxRecordBytes,
			Config: r.Config, CreatedAt: r.CreatedAt.Time}
	}
	return out, nil
}

// TopicGet returns the topic name; pgx.ErrNoRows when there is none.
func (s *Store) TopicGet(ctx context.Context, exec DBTX, name string) (*Topic, error) {
	r, err := s.q.TopicGet(ctx, s.DB(exec), name)
	if err != nil {
		return nil, errs.Map(err)
	}
	return &Topic{Name: r.Name, Partitions: r.Partitions, SegmentRecords: r.SegmentRecords, MaxRecordBytes: r.MaxRecordBytes,
		Config: r.Config, CreatedAt: r.CreatedAt.Time}, nil
}

// TopicPartition describes one partition of a topic (topic_describe()).
type TopicPartition struct {
	Partition   int32
	StartOffset int64
	NextOffset  int64
	Records     int64
	Segments    int32
	ApproxBytes int64
}

// TopicDescribe returns the partitions of topic name with their offsets,
// record counts and sizes.
func (s *Store) TopicDescribe(ctx context.Context, exec DBTX, name string) ([]TopicPartition, error) {
	rows, err := s.q.TopicDescribe(ctx, s.DB(exec), name)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]TopicPartition, len(rows))
	for i, r := range rows {
		out[i] = TopicPartition{Partition: r.Partition, StartOffset: r.StartOffset, NextOffset: r.NextOffset,
			Records: r.Records, Segments: r.Segments, ApproxBytes: r.ApproxBytes}
	}
	return out, nil
}

// TopicAddPartitions grows topic name to partitions partitions.
func (s *Store) TopicAddPartitions(ctx context.Context, exec DBTX, name string, partitions int32) (*Topic, error) {
	r, err := s.q.TopicAddPartitions(ctx, s.DB(exec), dbsqlc.TopicAddPartitionsParams{Name: name, Partitions: partitions})
	if err != nil {
		return nil, errs.Map(err)
	}
	return &Topic{Name: r.Name, Partitions: r.Partitions, SegmentRecords: r.SegmentRecords, MaxRecordBytes: r.MaxRecordBytes,
		Config: r.Config, CreatedAt: r.CreatedAt.Time}, nil
}

// TopicConfigure changes topic name's settings: settings is a JSON object
// whose keys are set to their values, or removed for null
// (topic_configure()).
func (s *Store) TopicConfigure(ctx context.Context, exec DBTX, name string, settings []byte) (*Topic, error) {
	r, err := s.q.TopicConfigure(ctx, s.DB(exec), dbsqlc.TopicConfigureParams{Name: name, Settings: settings})
	if err != nil {
		return nil, errs.Map(err)
	}
	return &Topic{Name: r.Name, Partitions: r.Partitions, SegmentRecords: r.SegmentRecords, MaxRecordBytes: r.MaxRecordBytes,
		Config: r.Config, CreatedAt: r.CreatedAt.Time}, nil
}

// TopicDelete drops topic name with its records and groups; a topic with
// records or groups only when force (else errs.TopicNotEmpty).
func (s *Store) TopicDelete(ctx context.Context, exec DBTX, name string, force bool) error {
	return errs.Map(s.q.TopicDelete(ctx, s.DB(exec), dbsqlc.TopicDeleteParams{Name: name, Force: force}))
}
