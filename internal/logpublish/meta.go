package logpublish

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pgmsg/pgmsg/internal/store"
)

// TopicMeta is what a publish needs to know of a topic, cached for
// MetadataMaxAge so that a publish costs no lookup round trip; the SQL
// API checks the settings again on every publish.
type TopicMeta struct {
	// ID is the topic's topic_id.
	ID int32
	// Partitions is the topic's partition count.
	Partitions int
	// MaxRecordBytes is the topic's max_record_bytes.
	MaxRecordBytes int
	// Backpressure: the topic has max_lag_records or max_lag_bytes, which
	// only publish() enforces (the store's direct publish statement leaves
	// such topics to it).
	Backpressure bool
	fetched      time.Time
}

// TopicMeta returns the cached metadata of topic, refreshing it when
// older than MetadataMaxAge (or when refresh is set). An invalid or
// unknown name is the SQL API's answer (PM003, PM001).
func (p *Publisher) TopicMeta(ctx context.Context, exec store.DBTX, topic string, refresh bool) (TopicMeta, error) {
	p.metaMu.Lock()
	m, ok := p.meta[topic]
	p.metaMu.Unlock()
	if ok && !refresh && time.Since(m.fetched) < p.cfg.MetadataMaxAge {
		return m, nil
	}
	row, err := p.store.TopicSettings(ctx, exec, topic) // PM003, PM001 from SQL
	if err != nil {
		return TopicMeta{}, err
	}
	m = TopicMeta{ID: row.TopicID, Partitions: int(row.Partitions), MaxRecordBytes: int(row.MaxRecordBytes), fetched: time.Now()}
	var settings struct {
		MaxLagRecords json.RawMessage `json:"max_lag_records"`
		MaxLagBytes   json.RawMessage `json:"max_lag_bytes"`
	}
	if err := json.Unmarshal(row.Config, &settings); err != nil {
		m.Backpressure = true // publish() reads the settings itself
	} else {
		m.Backpressure = settings.MaxLagRecords != nil || settings.MaxLagBytes != nil
	}
	p.metaMu.Lock()
	p.meta[topic] = m
	p.metaMu.Unlock()
	return m, nil
}

// ForgetTopic drops topic's cached metadata, so that the next publish
// looks it up again (after a delete, a partition added, or an error that
// says the cache is stale).
func (p *Publisher) ForgetTopic(topic string) {
	p.metaMu.Lock()
	delete(p.meta, topic)
	p.metaMu.Unlock()
}
