package store

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"unsafe"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A Kafka idempotent producer's batch goes with COPY as a plain batch
// does (log_publish_copy.go), with two statements more in the same round
// trip and implicit transaction: the producer's lock on the partition
// (the statement file kafka_producer_lock.sql, as _kafka_publish() takes
// it) before the begin statement, whose guard declines (PM016) unless
// the batch is the producer's next one (kafka_sequence_next.sql); and the
// end statement saves the batch as the producer's last stored one
// (producer_state_save.sql). Whatever the guard declines (a retry, an
// older batch, a gap, a first publish on a new timeline, backpressure …)
// goes to _kafka_publish(), which tells the cases apart.

var (
	kafkaCopyLockSQL = `SELECT ` + stmt("kafka_producer_lock", "$1::text", "$2::text", "$3::integer", "$4::text")

	kafkaCopyBeginSQL = copyBegin(`WHEN NOT ` + stmt("kafka_sequence_next",
		`(SELECT s.last_sequence FROM pgmsg.producer_state s
                WHERE s.topic_id = $1::integer AND s.partition = $2::integer AND s.producer_id = $5::text)`,
		"$6::bigint") + `
            THEN pgmsg._raise('` + copyDeclinedCode + `', 'not the producer''s next batch: publish with _kafka_publish()')::text
            `)

	kafkaCopyEndSQL = `WITH e AS (
    ` + copyEndSQL + `
), saved AS (
    ` + stmt("producer_state_save", `SELECT $1::integer, $2::integer, $4::text, $5::bigint, $5::bigint + $3::integer - 1,
           e.base_offset, $3::integer, coalesce($6::timestamptz, pg_catalog.transaction_timestamp()) FROM e`) + `
)
SELECT e.base_offset, e.published_at_us, e.segments_low FROM e`
)

// kafkaCopyTexts are a store's idempotent COPY statements in its schema,
// made once.
type kafkaCopyTexts struct {
	once             sync.Once
	lock, begin, end string
}

func (s *Store) kafkaCopyTexts() *kafkaCopyTexts {
	t := &s.kafkaCopy
	t.once.Do(func() {
		setting := func(q string) string {
			return strings.ReplaceAll(s.SQL(q), "{{copy_offset_seq}}", "'"+copyOffsetSeqSetting+"'")
		}
		t.lock, t.begin, t.end = s.SQL(kafkaCopyLockSQL), setting(kafkaCopyBeginSQL), setting(kafkaCopyEndSQL)
	})
	return t
}

// kafkaCopyAnswer: the lock, begin and COPY statements complete before
// the end statement's row.
const kafkaCopyAnswer = 3

// KafkaPublishCopy appends b (CopyEligible) as producerID's records
// numbered from sequence, with COPY, when it is the producer's next batch
// on the partition (topic id topicID): it returns the stored batch's
// result, or nil, nil when nothing was stored and KafkaPublish must
// decide (the batch is not the next one, the server declined as for
// PublishCopy, or the connection's role may not use COPY).
func (s *Store) KafkaPublishCopy(ctx context.Context, pool *pgxpool.Pool, topicID int32, b *PublishBatch, producerID string, sequence int64) (*PublishResult, error) {
	t := s.kafkaCopyTexts()
	return s.publishCopy(ctx, pool, b, kafkaCopyAnswer, s.kafkaCopyExtra(b, producerID), func(buf []byte, prepared []string) []byte {
		return s.encodeKafkaCopy(buf, prepared, topicID, b, producerID, sequence)
	}, t.lock, t.begin, t.end)
}

// kafkaCopyExtra bounds what encodeKafkaCopy writes besides encodeCopy's
// messages: the lock statement's Bind and the producer's parameters.
func (s *Store) kafkaCopyExtra(b *PublishBatch, producerID string) int {
	return 128 + len(s.schema) + len(b.Topic) + 3*len(producerID)
}

// encodeKafkaCopy appends to buf an idempotent COPY publish's messages:
// the prepared lock, begin and end statements' (prepared) Binds and
// Executes around the COPY (appendCopyRows), and Sync.
func (s *Store) encodeKafkaCopy(buf []byte, prepared []string, topicID int32, b *PublishBatch, producerID string, sequence int64) []byte {
	p := newCopyParams(topicID, b)
	var seq, ts [8]byte
	binary.BigEndian.PutUint64(seq[:], uint64(sequence))
	first := []byte(nil) // NULL: the publish time
	if b.timestamps != nil {
		binary.BigEndian.PutUint64(ts[:], uint64(b.timestamps[0].Time.UnixMicro()-pgEpochMicros))
		first = ts[:]
	}
	buf = appendBind(buf, prepared[0], strBytes(s.schema), strBytes(b.Topic), p.part[:], strBytes(producerID))
	buf = appendExecute(buf)
	buf = appendBind(buf, prepared[1], p.topic[:], p.part[:], p.count[:], p.bound[:], strBytes(producerID), seq[:])
	buf = appendExecute(buf)
	buf = s.appendCopyRows(buf, topicID, b)
	buf = appendBind(buf, prepared[2], p.topic[:], p.part[:], p.count[:], strBytes(producerID), seq[:], first)
	buf = appendExecute(buf)
	return append(buf, 'S', 0, 0, 0, 4)
}

// strBytes is s's bytes without a copy, for appendBind, which only reads
// them.
func strBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
