package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// The idempotent COPY publish sizes its buffer from copySize,
// copyMessagesBytes and kafkaCopyExtra: its messages must fit, with the
// longest schema, topic and producer names.
func TestEncodeKafkaCopyFitsItsBound(t *testing.T) {
	long := strings.Repeat("s", 63)
	topic := strings.Repeat("t", 249) // Kafka's longest topic name
	pid := "kafka-9223372036854775807-32767"
	for _, n := range []int{16, 1000} {
		b := NewPublishBatch(topic, 3, n)
		for i := range b.Values {
			b.Values[i] = make([]byte, 10)
			b.SetKey(i, []byte("k"))
			b.SetHeaders(i, []byte(`{"a":"b"}`))
			b.SetTimestamp(i, time.Unix(1, 0))
		}
		s := New(long)
		stmt := "stmt_" + strings.Repeat("f", 48)
		buf := s.encodeKafkaCopy(nil, []string{stmt, stmt, stmt}, 7, &b, pid, 1<<40)
		if bound := b.copySize() + copyMessagesBytes + s.kafkaCopyExtra(&b, pid); len(buf) > bound {
			t.Errorf("%d records: %d bytes encoded, more than the %d KafkaPublishCopy allocates", n, len(buf), bound)
		}
	}
}

// A Kafka idempotent producer's batch goes with COPY only when it is the
// producer's next one on the partition; everything else (a retry, an
// older batch, a gap, a topic with backpressure settings) is declined
// with nothing stored and decided by _kafka_publish(), which stores a
// batch the fast statement declines through publish().
func TestKafkaPublishPaths(t *testing.T) {
	ctx := context.Background()
	b := pgtest.Schema(t, nil)
	s := New(b.Schema)
	q := func(sql string) string {
		return strings.ReplaceAll(sql, "pgmsg.", pgx.Identifier{b.Schema}.Sanitize()+".")
	}
	var topicID int32
	if err := b.Pool.QueryRow(ctx, q(`SELECT (pgmsg.topic_create('k', 1)).topic_id`)).Scan(&topicID); err != nil {
		t.Fatal(err)
	}
	batch := func(topic string, n int, tag string) *PublishBatch {
		pb := NewPublishBatch(topic, 0, n)
		for i := range pb.Values {
			pb.Values[i] = []byte(fmt.Sprintf("%s%d", tag, i))
			pb.SetTimestamp(i, time.UnixMilli(1_700_000_000_000+int64(i)))
		}
		return &pb
	}
	end := func(topic string) (n int64) {
		t.Helper()
		if err := b.Pool.QueryRow(ctx, q(`SELECT count(*) FROM pgmsg.record r JOIN pgmsg.topic t USING (topic_id) WHERE t.name = $1`), topic).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	state := func(topic, pid string) (first, last, base int64) {
		t.Helper()
		if err := b.Pool.QueryRow(ctx, q(`SELECT s.first_sequence, s.last_sequence, s.base_offset FROM pgmsg.producer_state s
JOIN pgmsg.topic t USING (topic_id) WHERE t.name = $1 AND s.producer_id = $2`), topic, pid).Scan(&first, &last, &base); err != nil {
			t.Fatal(err)
		}
		return
	}
	copyPub := func(topic string, pb *PublishBatch, pid string, seq int64) *PublishResult {
		t.Helper()
		var id int32
		if err := b.Pool.QueryRow(ctx, q(`SELECT topic_id FROM pgmsg.topic WHERE name = $1`), topic).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if !pb.CopyEligible() {
			t.Fatal("batch not eligible for COPY")
		}
		res, err := s.KafkaPublishCopy(ctx, b.Pool, id, pb, pid, seq)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	kafkaPub := func(pb *PublishBatch, pid string, seq int64) KafkaPublishResult {
		t.Helper()
		res, err := s.KafkaPublish(ctx, b.Pool, pb, pid, seq)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// The producer's first batch (sequence 0) with COPY.
	b0 := batch("k", 20, "a")
	res := copyPub("k", b0, "p1", 0)
	if res == nil || res.BaseOffset != 0 || res.RecordCount != 20 {
		t.Fatalf("first batch with COPY: %+v", res)
	}
	if f, l, base := state("k", "p1"); f != 0 || l != 19 || base != 0 {
		t.Fatalf("producer state after COPY: %d..%d at %d", f, l, base)
	}
	// Sent again: COPY declines, _kafka_publish() answers the stored offset.
	if res := copyPub("k", b0, "p1", 0); res != nil {
		t.Fatalf("a retry stored again with COPY: %+v", res)
	}
	if r := kafkaPub(b0, "p1", 0); r.Outcome != KafkaDuplicate || r.Result.BaseOffset != 0 {
		t.Fatalf("retry: %+v", r)
	}
	// The next batch through the one statement, then one with COPY.
	if r := kafkaPub(batch("k", 3, "b"), "p1", 20); r.Outcome != KafkaStored || r.Result.BaseOffset != 20 {
		t.Fatalf("next small batch: %+v", r)
	}
	if res := copyPub("k", batch("k", 16, "c"), "p1", 23); res == nil || res.BaseOffset != 23 {
		t.Fatalf("next batch with COPY: %+v", res)
	}
	// A gap, an older batch and a new producer's first batch not at 0:
	// declined by COPY, refused by _kafka_publish().
	for _, tc := range []struct {
		pid  string
		seq  int64
		want KafkaPublishOutcome
	}{{"p1", 100, KafkaOutOfOrder}, {"p1", 0, KafkaOld}, {"p2", 5, KafkaOutOfOrder}} {
		pb := batch("k", 16, "x")
		if res := copyPub("k", pb, tc.pid, tc.seq); res != nil {
			t.Fatalf("%s at %d stored with COPY: %+v", tc.pid, tc.seq, res)
		}
		if r := kafkaPub(pb, tc.pid, tc.seq); r.Outcome != tc.want {
			t.Fatalf("%s at %d: %s, want %s", tc.pid, tc.seq, r.Outcome, tc.want)
		}
	}
	if n := end("k"); n != 39 {
		t.Fatalf("%d records stored, want 39", n)
	}

	// A topic with backpressure settings: the fast statement and COPY
	// decline it, and _kafka_publish() stores it through publish().
	if _, err := b.Pool.Exec(ctx, q(`SELECT pgmsg.topic_create('bp', 1, '{"max_lag_records": 1000000}')`)); err != nil {
		t.Fatal(err)
	}
	bp := batch("bp", 16, "y")
	var direct int
	if err := b.Pool.QueryRow(ctx, q(`SELECT count(*) FROM pgmsg._publish_direct('bp', 0, $1::bytea[], NULL, NULL, NULL)`),
		[][]byte{[]byte("probe")}).Scan(&direct); err != nil || direct != 0 {
		t.Fatalf("_publish_direct() took a backpressure topic's batch (%d rows, %v): the slow path would not be tested", direct, err)
	}
	if res := copyPub("bp", bp, "p1", 0); res != nil {
		t.Fatalf("backpressure topic stored with COPY: %+v", res)
	}
	if r := kafkaPub(bp, "p1", 0); r.Outcome != KafkaStored || r.Result.BaseOffset != 0 {
		t.Fatalf("backpressure topic: %+v", r)
	}
	if r := kafkaPub(bp, "p1", 0); r.Outcome != KafkaDuplicate || r.Result.BaseOffset != 0 {
		t.Fatalf("backpressure topic retry: %+v", r)
	}
	if f, l, base := state("bp", "p1"); f != 0 || l != 15 || base != 0 || end("bp") != 16 {
		t.Fatalf("backpressure topic: state %d..%d at %d, %d records", f, l, base, end("bp"))
	}
}

// The COPY publish and _kafka_publish() take the same producer lock: a
// copy of a batch arriving at a second listener while the first one's
// transaction is open waits for it, then finds the batch stored and
// declines, instead of storing it twice.
func TestKafkaPublishCopySharesTheLock(t *testing.T) {
	ctx := context.Background()
	b := pgtest.Schema(t, nil)
	s := New(b.Schema)
	sch := pgx.Identifier{b.Schema}.Sanitize()
	var topicID int32
	if err := b.Pool.QueryRow(ctx, `SELECT (`+sch+`.topic_create('k', 1)).topic_id`).Scan(&topicID); err != nil {
		t.Fatal(err)
	}
	pb := NewPublishBatch("k", 0, 16)
	for i := range pb.Values {
		pb.Values[i] = []byte{byte(i)}
	}
	tx, err := b.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if r, err := s.KafkaPublish(ctx, tx, &pb, "p", 0); err != nil || r.Outcome != KafkaStored {
		t.Fatalf("first copy: %+v %v", r, err)
	}
	type out struct {
		res *PublishResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := s.KafkaPublishCopy(ctx, b.Pool, topicID, &pb, "p", 0)
		done <- out{res, err}
	}()
	// Wait until the second copy waits for the lock (an advisory lock).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case o := <-done:
			t.Fatalf("the COPY publish did not wait for the open transaction's lock: %+v %v", o.res, o.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the COPY publish never waited for the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || o.res != nil {
		t.Fatalf("after the first copy committed, the second must be declined: %+v %v", o.res, o.err)
	}
	var n int
	if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+sch+`.record`).Scan(&n); err != nil || n != 16 {
		t.Fatalf("%d records stored (%v), want 16", n, err)
	}
}

// The listener of `pgmsg serve` runs as the schema's admin role, which may
// not write the record table: its COPY is refused (nothing stored, and the
// store stops trying), and _kafka_publish() stores the batch.
func TestKafkaPublishCopyAsAdmin(t *testing.T) {
	ctx := context.Background()
	b := pgtest.Schema(t, nil)
	sch := pgx.Identifier{b.Schema}.Sanitize()
	var topicID int32
	if err := b.Pool.QueryRow(ctx, `SELECT (`+sch+`.topic_create('k', 1)).topic_id`).Scan(&topicID); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	role := pgx.Identifier{b.Schema + "_admin"}.Sanitize()
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+role)
		return err
	}
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	s := New(b.Schema)
	pb := NewPublishBatch("k", 0, 16)
	for i := range pb.Values {
		pb.Values[i] = []byte{byte(i)}
	}
	res, err := s.KafkaPublishCopy(ctx, admin, topicID, &pb, "p", 0)
	if err != nil || res != nil {
		t.Fatalf("COPY as the admin role: %+v, %v; want nothing stored and no error", res, err)
	}
	if !s.copyDenied.Load() {
		t.Fatal("the refusal was not remembered")
	}
	r, err := s.KafkaPublish(ctx, admin, &pb, "p", 0)
	if err != nil || r.Outcome != KafkaStored || r.Result.BaseOffset != 0 {
		t.Fatalf("_kafka_publish() as the admin role: %+v, %v", r, err)
	}
	var n int
	if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+sch+`.record`).Scan(&n); err != nil || n != 16 {
		t.Fatalf("%d records stored (%v), want 16", n, err)
	}
}

// KafkaPublishMany decides each producer's batch as _kafka_publish()
// does, in one transaction: next batches stored in the order given, a
// retry answered with its stored offset, a gap declined with nothing
// stored; and a batch the server refuses rolls every item back.
func TestKafkaPublishMany(t *testing.T) {
	ctx := context.Background()
	b := pgtest.Schema(t, nil)
	s := New(b.Schema)
	q := func(sql string) string {
		return strings.ReplaceAll(sql, "pgmsg.", pgx.Identifier{b.Schema}.Sanitize()+".")
	}
	if _, err := b.Pool.Exec(ctx, q(`SELECT pgmsg.topic_create('m', 1, '{"max_record_bytes": 100}')`)); err != nil {
		t.Fatal(err)
	}
	batch := func(n int, tag string) *PublishBatch {
		pb := NewPublishBatch("m", 0, n)
		for i := range pb.Values {
			pb.Values[i] = []byte(fmt.Sprintf("%s%d", tag, i))
		}
		return &pb
	}
	count := func() (n int64) {
		t.Helper()
		if err := b.Pool.QueryRow(ctx, q(`SELECT count(*) FROM pgmsg.record`)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	res, err := s.KafkaPublishMany(ctx, b.Pool, []KafkaPublishItem{
		{Batch: batch(3, "b"), ProducerID: "p-b", Sequence: 0},
		{Batch: batch(2, "a"), ProducerID: "p-a", Sequence: 0},
		{Batch: batch(2, "c"), ProducerID: "p-c", Sequence: 5},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != KafkaStored || res[0].Result.BaseOffset != 0 || res[1].Outcome != KafkaStored || res[1].Result.BaseOffset != 3 {
		t.Fatalf("first two: %+v, %+v; want stored at 0 and 3", res[0], res[1])
	}
	if res[2].Outcome != KafkaOutOfOrder || res[2].State.Found {
		t.Fatalf("a first batch at sequence 5: %+v, want out_of_order with no state", res[2])
	}
	if n := count(); n != 5 {
		t.Fatalf("%d records stored, want 5", n)
	}
	// A retry of p-b's batch and p-a's next one.
	res, err = s.KafkaPublishMany(ctx, b.Pool, []KafkaPublishItem{
		{Batch: batch(3, "b"), ProducerID: "p-b", Sequence: 0},
		{Batch: batch(1, "a"), ProducerID: "p-a", Sequence: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != KafkaDuplicate || res[0].Result.BaseOffset != 0 || res[1].Outcome != KafkaStored || res[1].Result.BaseOffset != 5 {
		t.Fatalf("retry and next: %+v, %+v", res[0], res[1])
	}
	// A record larger than the topic allows fails the statement: nothing
	// of the round is stored.
	big := batch(1, "x")
	big.Values[0] = make([]byte, 1000)
	if _, err := s.KafkaPublishMany(ctx, b.Pool, []KafkaPublishItem{
		{Batch: batch(1, "a"), ProducerID: "p-a", Sequence: 3},
		{Batch: big, ProducerID: "p-d", Sequence: 0},
	}); err == nil {
		t.Fatal("a record over max_record_bytes was accepted")
	}
	if n := count(); n != 6 {
		t.Fatalf("%d records after a refused round, want 6", n)
	}
}
