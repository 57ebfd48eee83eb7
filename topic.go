package pgmsg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/store"
)

// Limits of topic settings.
const (
	PartitionsMin         = 1
	PartitionsMax         = 1024
	SegmentRecordsDefault = 1 << 20
	SegmentRecordsMin     = 16
	MaxRecordBytesDefault = 1 << 20
)

// TopicConfig is a topic's settings. Zero fields take their defaults.
type TopicConfig struct {
	// Partitions, 1..1024. Default 1.
	Partitions int `json:"partitions"`
	// SegmentRecords is how many offsets one segment (one range partition of
	// the record table) holds; retention drops whole segments. Default 1Mi.
	SegmentRecords int64 `json:"segment_records,omitempty"`
	// MaxRecordBytes caps key + value + headers of one record. Default 1 MiB.
	MaxRecordBytes int `json:"max_record_bytes,omitempty"`
	// Settings holds further settings (retention and cleanup policy are read
	// by later features); stored as given.
	Settings map[string]any `json:"settings,omitempty"`
}

// Topic describes a topic.
type Topic struct {
	Name           string         `json:"name"`
	Partitions     int            `json:"partitions"`
	SegmentRecords int64          `json:"segment_records"`
	MaxRecordBytes int            `json:"max_record_bytes"`
	Settings       map[string]any `json:"settings"`
	CreatedAt      time.Time      `json:"created_at"`
}

// PartitionInfo describes one partition of a topic.
type PartitionInfo struct {
	Partition int32 `json:"partition"`
	// StartOffset is the lowest offset still stored.
	StartOffset int64 `json:"start_offset"`
	// NextOffset is the offset the next record will get (the end offset).
	NextOffset int64 `json:"next_offset"`
	Records    int64 `json:"records"`
	Segments   int   `json:"segments"`
	// ApproxBytes is the on-disk size of the partition's segments, indexes included.
	ApproxBytes int64 `json:"approx_bytes"`
}

// TopicDescription is a topic and its partitions.
type TopicDescription struct {
	Topic
	PartitionInfo []PartitionInfo `json:"partition_info"`
}

// ValidateName returns ErrInvalidName unless name is 1-200 letters, digits,
// '.', '_' or '-' (topic and group names).
func ValidateName(kind, name string) error {
	if len(name) < 1 || len(name) > 200 {
		return newError(ErrInvalidName, "invalid %s name %q: use 1-200 letters, digits, '.', '_' or '-'", kind, truncate(name, 60))
	}
	for i := 0; i < len(name); i++ {
		if !isNameChar(name[i]) {
			return newError(ErrInvalidName, "invalid %s name %q: use 1-200 letters, digits, '.', '_' or '-'", kind, truncate(name, 60))
		}
	}
	return nil
}

// isNameChar reports whether ch may appear in a topic, group, queue or
// member name: an ASCII letter or digit, '.', '_' or '-'.
func isNameChar(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-'
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// CreateTopic creates a topic. It fails with ErrTopicExists, ErrInvalidName
// or ErrInvalidArgument.
func (c *Client) CreateTopic(ctx context.Context, name string, cfg TopicConfig) (*Topic, error) {
	return c.CreateTopicTx(ctx, c.pool, name, cfg)
}

// CreateTopicTx is CreateTopic on exec (typically a pgx.Tx).
func (c *Client) CreateTopicTx(ctx context.Context, exec DBTX, name string, cfg TopicConfig) (*Topic, error) {
	// topic_create() refuses a bad name (PM003) and partition count
	// (PM004), in that order, before it writes anything; Go only a name
	// that cannot be sent.
	if err := sendableNames("topic", name); err != nil {
		return nil, err
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	settings := map[string]any{}
	for k, v := range cfg.Settings {
		settings[k] = v
	}
	if cfg.SegmentRecords != 0 {
		settings["segment_records"] = cfg.SegmentRecords
	}
	if cfg.MaxRecordBytes != 0 {
		settings["max_record_bytes"] = cfg.MaxRecordBytes
	}
	raw, err := json.Marshal(settings)
	if err != nil {
		return nil, newError(ErrInvalidArgument, "topic settings are not JSON: %v", err)
	}
	row, err := c.store.TopicCreate(ctx, exec, name, limit32(cfg.Partitions), raw)
	if err != nil {
		return nil, err
	}
	return topicFromRow(row)
}

// topicFromRow is the Topic a row of the topic table describes.
func topicFromRow(r *store.Topic) (*Topic, error) {
	t := &Topic{Name: r.Name, Partitions: int(r.Partitions), SegmentRecords: r.SegmentRecords,
		MaxRecordBytes: int(r.MaxRecordBytes), CreatedAt: r.CreatedAt}
	if err := json.Unmarshal(r.Config, &t.Settings); err != nil {
		return nil, fmt.Errorf("pgmsg: decode topic settings: %w", err)
	}
	return t, nil
}

// ListTopics returns every topic, by name.
func (c *Client) ListTopics(ctx context.Context) ([]*Topic, error) {
	rows, err := c.store.TopicList(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	out := make([]*Topic, 0, len(rows))
	for i := range rows {
		t, err := topicFromRow(&rows[i])
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// DescribeTopic returns a topic with per-partition offsets, record counts
// and sizes. It fails with ErrUnknownTopic.
func (c *Client) DescribeTopic(ctx context.Context, name string) (*TopicDescription, error) {
	var desc *TopicDescription
	err := c.readOnly(ctx, func(exec DBTX) error {
		r, err := c.store.TopicGet(ctx, exec, name)
		if err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				// Worded as the SQL API words it (quote_literal).
				return newError(ErrUnknownTopic, "unknown topic '%s'", strings.ReplaceAll(name, "'", "''"))
			}
			return err
		}
		t, err := topicFromRow(r)
		if err != nil {
			return err
		}
		desc = &TopicDescription{Topic: *t}
		rows, err := c.store.TopicDescribe(ctx, exec, name)
		if err != nil {
			return err
		}
		for _, r := range rows {
			desc.PartitionInfo = append(desc.PartitionInfo, PartitionInfo{
				Partition: r.Partition, StartOffset: r.StartOffset, NextOffset: r.NextOffset,
				Records: r.Records, Segments: int(r.Segments), ApproxBytes: r.ApproxBytes,
			})
		}
		return nil
	})
	return desc, err
}

// AddPartitions grows a topic to partitions partitions. Existing groups
// read the new partitions from their start. Keys may map to different
// partitions afterwards, as in Kafka.
func (c *Client) AddPartitions(ctx context.Context, name string, partitions int) (*Topic, error) {
	// topic_add_partitions() refuses a count out of 1..1024 (PM004) before
	// it looks the topic up; the count is sent capped, not wrapped.
	row, err := c.store.TopicAddPartitions(ctx, c.pool, name, limit32(partitions))
	if err != nil {
		return nil, err
	}
	c.forgetTopic(name)
	return topicFromRow(row)
}

// SetTopicSettings changes a topic's settings: each key is set to its value,
// and a key with a nil value is removed. Settings read by pgmsg:
// segment_records, max_record_bytes, retention_ms, retention_bytes,
// retention_records, hard_limit_ms, hard_limit_bytes, hard_limit_records,
// group_ttl_ms, cleanup_policy ("delete", "compact"), delete_retention_ms,
// max_lag_records, max_lag_bytes, backpressure_timeout_ms
// (docs/operations.md). The backpressure settings are checked here: an
// invalid value fails with ErrInvalidArgument.
func (c *Client) SetTopicSettings(ctx context.Context, name string, settings map[string]any) (*Topic, error) {
	raw, err := json.Marshal(settings)
	if err != nil {
		return nil, newError(ErrInvalidArgument, "topic settings are not JSON: %v", err)
	}
	row, err := c.store.TopicConfigure(ctx, c.pool, name, raw)
	if err != nil {
		return nil, err
	}
	c.forgetTopic(name)
	return topicFromRow(row)
}

// DeleteTopic drops a topic with whatever records and groups it has, as
// Kafka's topic deletion does. It fails with ErrUnknownTopic.
// DeleteEmptyTopic is the careful form the CLI and HTTP API use.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	defer c.forgetTopic(name)
	return c.store.TopicDelete(ctx, c.pool, name, true)
}

// DeleteEmptyTopic drops a topic that stores no records and has no
// consumer groups; otherwise it fails with ErrTopicNotEmpty and deletes
// nothing (SQL topic_delete(name, false)). It fails with ErrUnknownTopic.
func (c *Client) DeleteEmptyTopic(ctx context.Context, name string) error {
	defer c.forgetTopic(name)
	return c.store.TopicDelete(ctx, c.pool, name, false)
}

// readOnly runs fn in a repeatable-read, read-only transaction, so that
// several reads see one snapshot.
func (c *Client) readOnly(ctx context.Context, fn func(exec DBTX) error) error {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
