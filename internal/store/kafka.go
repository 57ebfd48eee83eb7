package store

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// The statements of the Kafka listener (internal/kafkasrv): what a Kafka
// Fetch and ListOffsets need that the SQL API's functions answer one
// partition or one topic at a time, in one round trip each.

// KafkaPartition is one partition of a topic as the Kafka listener needs
// it: its log start offset, its high watermark (the next offset) and its
// log epoch (which changes when the log past some offset may hold other
// records than before: on a promoted standby).
type KafkaPartition struct {
	TopicID     int32
	Partition   int32
	StartOffset int64
	NextOffset  int64
	// LogEpoch is the partition's log epoch as this server now writes it
	// (kafkaLogEpoch): on a promoted standby, the epoch its next publish
	// starts at NextOffset, before that publish runs.
	LogEpoch int32
	// HolesBelow is the offset below which the partition may lack
	// records (RangeSegments, MissesStored): from it on, every offset
	// below NextOffset is stored.
	HolesBelow int64
}

// kafkaLogEpoch is the log epoch of topic_partition row p on this
// server (log_epoch_next.sql): its log_epoch, or, when its last publish
// ran on another timeline (a promoted standby), the epoch the first
// publish here starts at its next_offset. The Kafka listener answers
// that one at once, as a Kafka broker bumps its leader epoch when it
// becomes the leader and not when it first appends: a client that read
// past the new primary's end learns of the truncation before anything
// is published there.
var kafkaLogEpoch = stmt("log_epoch_next", "p.log_epoch", "p.log_timeline", "tl.tl")

// kafkaTimeline is the FROM item tl(tl) of this server's timeline. It
// reads pg_current_wal_lsn(), which a standby refuses during recovery:
// the listener runs these statements on its client's pool, which must be
// the primary's (target_session_attrs=read-write on a multi-host URL),
// as the listener writes there from its start (its kafka_broker row) and
// with every produce and group request. It never reads a standby; its
// client's read replicas serve consumers' claimed records only.
var kafkaTimeline = `(SELECT ` + stmt("timeline") + `) tl(tl)`

// KafkaPartitions returns every partition of topic in partition order, or
// none when the topic does not exist.
func (s *Store) KafkaPartitions(ctx context.Context, exec DBTX, topic string) ([]KafkaPartition, error) {
	rows, err := exec.Query(ctx, s.SQL(`SELECT t.topic_id, p.partition, p.start_offset, p.next_offset, `+kafkaLogEpoch+`,
       greatest(p.start_offset, p.compacted_to)
FROM pgmsg.topic t JOIN pgmsg.topic_partition p ON p.topic_id = t.topic_id CROSS JOIN `+kafkaTimeline+`
WHERE t.name = $1::text ORDER BY p.partition`), topic)
	if err != nil {
		return nil, errs.Map(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KafkaPartition, error) {
		var p KafkaPartition
		err := r.Scan(&p.TopicID, &p.Partition, &p.StartOffset, &p.NextOffset, &p.LogEpoch, &p.HolesBelow)
		return p, err
	})
	return out, errs.Map(err)
}

// KafkaLogEpochs returns the log epoch (kafkaLogEpoch) of every
// partition of topics, indexed by partition, for the topics that exist.
func (s *Store) KafkaLogEpochs(ctx context.Context, exec DBTX, topics []string) (map[string][]int32, error) {
	rows, err := exec.Query(ctx, s.SQL(`SELECT t.name, p.partition, `+kafkaLogEpoch+`
FROM pgmsg.topic t JOIN pgmsg.topic_partition p ON p.topic_id = t.topic_id CROSS JOIN `+kafkaTimeline+`
WHERE t.name = ANY($1::text[]) ORDER BY t.name, p.partition`), topics)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := map[string][]int32{}
	var name string
	var partition, epoch int32
	_, err = pgx.ForEachRow(rows, []any{&name, &partition, &epoch}, func() error {
		e := out[name]
		for int32(len(e)) < partition {
			e = append(e, -1) // not read: partitions are numbered from 0 without gaps
		}
		out[name] = append(e, epoch)
		return nil
	})
	return out, errs.Map(err)
}

// KafkaEpoch is where one log epoch of a partition began.
type KafkaEpoch struct {
	Epoch int32
	Start int64
}

// KafkaEpochs returns the log epochs of partition of topic id topicID
// after its first one (epoch 0, from the log's beginning), in epoch
// order: where each began on this server (the log_epoch rows; epochs of
// another history that this server never had are not among them), and
// the epoch a publish here starts at the partition's next offset when
// the partition's last publish ran on another timeline (kafkaLogEpoch).
func (s *Store) KafkaEpochs(ctx context.Context, exec DBTX, topicID, partition int32) ([]KafkaEpoch, error) {
	rows, err := exec.Query(ctx, s.SQL(`SELECT e.epoch, e.start_offset FROM pgmsg.log_epoch e
WHERE e.topic_id = $1::integer AND e.partition = $2::integer
UNION ALL
SELECT `+kafkaLogEpoch+`, p.next_offset FROM pgmsg.topic_partition p CROSS JOIN `+kafkaTimeline+`
WHERE p.topic_id = $1::integer AND p.partition = $2::integer AND `+kafkaLogEpoch+` <> p.log_epoch
ORDER BY 1`), topicID, partition)
	if err != nil {
		return nil, errs.Map(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KafkaEpoch, error) {
		var e KafkaEpoch
		err := r.Scan(&e.Epoch, &e.Start)
		return e, err
	})
	return out, errs.Map(err)
}

// KafkaRecord is a record the Kafka listener reads: Headers is the stored
// jsonb text (DecodeHeaders), nil for none.
type KafkaRecord struct {
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []byte
}

// KafkaRecords reads up to max records of (topicID, partition) with
// offsets in [from, end), in offset order. Offsets compaction removed are
// skipped: the read is by the primary key's order, not a range of
// offsets, so a gap never ends it early.
func (s *Store) KafkaRecords(ctx context.Context, exec DBTX, topicID, partition int32, from, end int64, max int32) ([]KafkaRecord, error) {
	rows, err := exec.Query(ctx, s.SQL(`SELECT r."offset", r."timestamp", r.key, r.value, r.headers
FROM pgmsg.record r
WHERE r.topic_id = $1::integer AND r.partition = $2::integer
  AND r."offset" >= $3::bigint AND r."offset" < $4::bigint
ORDER BY r."offset" LIMIT $5::integer`), RecordTableMode, topicID, partition, from, end, max)
	if err != nil {
		return nil, errs.Map(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KafkaRecord, error) {
		var k KafkaRecord
		err := r.Scan(&k.Offset, &k.Timestamp, &k.Key, &k.Value, &k.Headers)
		return k, err
	})
	return out, errs.Map(err)
}

// KafkaProducerID returns a new Kafka producer id (InitProducerId).
func (s *Store) KafkaProducerID(ctx context.Context, exec DBTX) (int64, error) {
	var id int64
	err := exec.QueryRow(ctx, s.SQL(`SELECT pg_catalog.nextval('pgmsg.kafka_producer_id'::regclass)`)).Scan(&id)
	return id, errs.Map(err)
}

// KafkaBroker is a live listener of the Kafka cluster registry.
type KafkaBroker struct {
	NodeID int32
	Host   string
	Port   int32
}

// KafkaBrokerRegister takes node id for instance: it inserts the row, or
// takes it over from a holder whose session ended (or from instance
// itself). It reports whether the node id is instance's now.
func (s *Store) KafkaBrokerRegister(ctx context.Context, exec DBTX, nodeID int32, host string, port int32, instance string, sessionTimeout time.Duration) (bool, error) {
	tag, err := exec.Exec(ctx, s.SQL(`INSERT INTO pgmsg.kafka_broker AS b (node_id, host, port, instance, session_timeout)
VALUES ($1::integer, $2::text, $3::integer, $4::text, $5::interval)
ON CONFLICT (node_id) DO UPDATE SET host = excluded.host, port = excluded.port, instance = excluded.instance,
    started_at = pg_catalog.now(), heartbeat_at = pg_catalog.now(), session_timeout = excluded.session_timeout
WHERE b.instance = excluded.instance OR b.heartbeat_at + b.session_timeout < pg_catalog.now()`),
		nodeID, host, port, instance, sessionTimeout)
	if err != nil {
		return false, errs.Map(err)
	}
	return tag.RowsAffected() == 1, nil
}

// KafkaBrokerHeartbeat renews instance's hold of node id; false when it
// lost it (its session ended and another instance took the node id).
func (s *Store) KafkaBrokerHeartbeat(ctx context.Context, exec DBTX, nodeID int32, instance string) (bool, error) {
	tag, err := exec.Exec(ctx, s.SQL(`UPDATE pgmsg.kafka_broker SET heartbeat_at = pg_catalog.now()
WHERE node_id = $1::integer AND instance = $2::text`), nodeID, instance)
	if err != nil {
		return false, errs.Map(err)
	}
	return tag.RowsAffected() == 1, nil
}

// KafkaBrokerLeave removes instance's row: its partitions and groups
// move at once.
func (s *Store) KafkaBrokerLeave(ctx context.Context, exec DBTX, nodeID int32, instance string) error {
	_, err := exec.Exec(ctx, s.SQL(`DELETE FROM pgmsg.kafka_broker WHERE node_id = $1::integer AND instance = $2::text`), nodeID, instance)
	return errs.Map(err)
}

// KafkaBrokers returns the node ids of every registered broker, live or
// not, and the live ones (heartbeat within their session timeout), in
// node id order.
func (s *Store) KafkaBrokers(ctx context.Context, exec DBTX) (all []int32, live []KafkaBroker, err error) {
	rows, err := exec.Query(ctx, s.SQL(`SELECT node_id, host, port, heartbeat_at + session_timeout >= pg_catalog.now()
FROM pgmsg.kafka_broker ORDER BY node_id`))
	if err != nil {
		return nil, nil, errs.Map(err)
	}
	defer rows.Close()
	for rows.Next() {
		var b KafkaBroker
		var alive bool
		if err := rows.Scan(&b.NodeID, &b.Host, &b.Port, &alive); err != nil {
			return nil, nil, errs.Map(err)
		}
		all = append(all, b.NodeID)
		if alive {
			live = append(live, b)
		}
	}
	return all, live, errs.Map(rows.Err())
}

// KafkaProducerState is an idempotent producer's last stored batch on a
// partition (producer_state), as _kafka_publish() found it.
type KafkaProducerState struct {
	Found         bool // the producer has a stored batch on the partition
	FirstSequence int64
	LastSequence  int64
}

// KafkaPublishOutcome is what _kafka_publish() did with a Kafka
// idempotent producer's batch: KafkaStored (appended), KafkaDuplicate (the
// last stored batch sent again: nothing written, the stored offset and
// time returned), KafkaOld (a batch before the last stored one),
// KafkaOutOfOrder (not the next sequence) or KafkaUnknown (no such topic
// or partition).
type KafkaPublishOutcome string

// The outcomes of KafkaPublish.
const (
	KafkaStored     KafkaPublishOutcome = "stored"
	KafkaDuplicate  KafkaPublishOutcome = "duplicate"
	KafkaOld        KafkaPublishOutcome = "old"
	KafkaOutOfOrder KafkaPublishOutcome = "out_of_order"
	KafkaUnknown    KafkaPublishOutcome = "unknown"
)

// KafkaPublishResult is _kafka_publish()'s answer. Result is set for
// KafkaStored and KafkaDuplicate; State is the producer's last stored
// batch before the call (Found false: none) for the others.
type KafkaPublishResult struct {
	Outcome KafkaPublishOutcome
	Result  PublishResult
	State   KafkaProducerState
}

// kafkaPublishSQL is the Kafka listener's idempotent publish of one
// partition's batch: one statement in autocommit (functions/log.sql).
const kafkaPublishSQL = `SELECT k.outcome, k.base_offset, k.published_at, k.segments_low, k.first_sequence, k.last_sequence
  FROM pgmsg._kafka_publish($1::text, $2::integer, $3::text, $4::bigint, $5::bytea[], $6::bytea[], $7::jsonb[], $8::timestamptz[]) k`

// KafkaPublish appends b as producerID's records numbered from sequence,
// by Kafka's sequence rule, in one statement (_kafka_publish()). Run it
// outside a transaction: its commit is the batch's.
func (s *Store) KafkaPublish(ctx context.Context, exec DBTX, b *PublishBatch, producerID string, sequence int64) (KafkaPublishResult, error) {
	out, err := scanKafkaPublish(exec.QueryRow(ctx, s.SQL(kafkaPublishSQL), b.Topic, b.Partition, producerID, sequence, b.Values, b.Keys,
		b.Headers, b.timestamps), b)
	return out, errs.Map(err)
}

// scanKafkaPublish reads _kafka_publish()'s answer for b.
func scanKafkaPublish(row pgx.Row, b *PublishBatch) (KafkaPublishResult, error) {
	var out KafkaPublishResult
	var base, first, last *int64
	var ts pgtype.Timestamptz
	var outcome string
	if err := row.Scan(&outcome, &base, &ts, &out.Result.SegmentsLow, &first, &last); err != nil {
		return out, err
	}
	out.Outcome = KafkaPublishOutcome(outcome)
	out.Result.Partition, out.Result.RecordCount = b.Partition, int32(len(b.Values))
	if base != nil {
		out.Result.BaseOffset, out.Result.Timestamp = *base, ts.Time
	}
	out.Result.Duplicate = out.Outcome == KafkaDuplicate
	if first != nil && last != nil {
		out.State = KafkaProducerState{Found: true, FirstSequence: *first, LastSequence: *last}
	}
	return out, nil
}

// KafkaPublishItem is one Kafka idempotent producer's batch for
// KafkaPublishMany.
type KafkaPublishItem struct {
	Batch      *PublishBatch
	ProducerID string
	Sequence   int64
}

// KafkaPublishMany decides and stores items, batches of one partition
// from different producers, each as KafkaPublish does, in one round trip
// and one transaction: one commit (and one WAL flush) for all of them
// instead of one each behind the partition's counter row. The producers'
// locks (kafka_producer_lock.sql) are taken first, in producer order, so
// that two listeners' groups of the same partition never wait on each
// other's producers while holding the counter row. An error rolls back
// every item: the caller then stores them one by one.
func (s *Store) KafkaPublishMany(ctx context.Context, pool *pgxpool.Pool, items []KafkaPublishItem) ([]KafkaPublishResult, error) {
	lockSQL, publishSQL := s.kafkaCopyTexts().lock, s.SQL(kafkaPublishSQL)
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return items[order[a]].ProducerID < items[order[b]].ProducerID })
	var batch pgx.Batch
	for _, i := range order {
		it := items[i]
		batch.Queue(lockSQL, s.schema, it.Batch.Topic, it.Batch.Partition, it.ProducerID)
	}
	for _, it := range items {
		b := it.Batch
		batch.Queue(publishSQL, b.Topic, b.Partition, it.ProducerID, it.Sequence, b.Values, b.Keys, b.Headers, b.timestamps)
	}
	br := pool.SendBatch(ctx, &batch)
	out := make([]KafkaPublishResult, len(items))
	var err error
	for range items {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	for i := 0; err == nil && i < len(items); i++ {
		out[i], err = scanKafkaPublish(br.QueryRow(), items[i].Batch)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, errs.Map(err)
	}
	return out, nil
}
