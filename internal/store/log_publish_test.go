package store_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
)

// parityRecord is one record of a publish parity batch; partition -1
// routes it by its key.
type parityRecord struct {
	partition int32
	key       []byte
	value     []byte
	headers   map[string][]byte
	ts        time.Time // zero: the publish time
}

// parityTopic is the topic of the parity test, and its partitions.
const (
	parityTopic      = "t"
	parityPartitions = 3
)

// paritySchema is a schema with the parity test's topics: "t" (three
// partitions), "lag" (backpressure) and "small" (records of at most 10
// bytes), and its store.
type paritySchema struct {
	b   *pgtest.Bundle
	s   *store.Store
	ids map[string]int32
}

func openParitySchema(t *testing.T, ctx context.Context) *paritySchema {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 2})
	ps := &paritySchema{b: b, s: store.New(b.Schema), ids: map[string]int32{}}
	for name, settings := range map[string]string{parityTopic: `{}`, "lag": `{"max_lag_records": 1000}`, "small": `{"max_record_bytes": 10}`} {
		parts := int32(parityPartitions)
		if name != parityTopic {
			parts = 1
		}
		if _, err := ps.s.TopicCreate(ctx, b.Pool, name, parts, []byte(settings)); err != nil {
			t.Fatal(err)
		}
		var id int32
		if err := b.Pool.QueryRow(ctx, `SELECT topic_id FROM `+pgx.Identifier{b.Schema}.Sanitize()+`.topic WHERE name = $1`, name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ps.ids[name] = id
	}
	return ps
}

// parityBatch is recs' records of partition p, in order, as a PublishBatch.
func parityBatch(t *testing.T, topic string, p int32, recs []parityRecord) *store.PublishBatch {
	t.Helper()
	b := store.NewPublishBatch(topic, p, len(recs))
	for i, r := range recs {
		b.Values[i] = r.value
		b.SetKey(i, r.key)
		h, err := store.EncodeHeaders(r.headers)
		if err != nil {
			t.Fatal(err)
		}
		b.SetHeaders(i, h)
		if !r.ts.IsZero() {
			b.SetTimestamp(i, r.ts)
		}
	}
	return &b
}

// The publish has three forms. The Go client sends a partition's batch
// with publishDirectSQL (PublishDirect) under CopyMinRecords records, with
// COPY (PublishCopy) from there on, and routes a keyed record to
// PartitionForKey's partition; the SQL API's publish() (Publish, which the
// Go forms leave their other cases to) routes a batch itself when given no
// partition. The same batches, on two schemas with the same topics, must
// store the same records (partition, offset, key, value, headers,
// timestamp, no byte position) and answer the same base offsets; a record
// without a timestamp is stamped with the publish time its form answers.
// And the Go forms must store nothing, and leave to publish(), what they
// do not cover: a topic with backpressure settings, a record over the
// topic's max_record_bytes, an unknown topic.
func TestPublishParity(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	at := func(s int) time.Time { return time.Date(2020, 1, 2, 3, 4, s, 123456000, time.UTC) }
	many := func(n int, mk func(i int) parityRecord) []parityRecord {
		out := make([]parityRecord, n)
		for i := range out {
			out[i] = mk(i)
		}
		return out
	}
	odd := []byte{0, 0xff, '\\', '\t', '\n', ',', '"', '\''}
	batches := [][]parityRecord{
		{{partition: 0, value: []byte("one")}},
		{ // the direct statement: every column, some NULL, some empty
			{partition: 1, value: []byte("a"), key: []byte("k1"), headers: map[string][]byte{"h": []byte("x"), "e": {}}},
			{partition: 1, value: nil},
			{partition: 1, value: []byte{}, key: []byte{}, ts: at(1)},
			{partition: 1, value: odd, key: odd, headers: map[string][]byte{"bin": odd}, ts: at(2)},
			{partition: 1, value: []byte("e")},
		},
		// COPY: keys and headers, no timestamps; then timestamps on every record.
		many(20, func(i int) parityRecord {
			r := parityRecord{partition: 2, value: []byte(fmt.Sprint("v", i))}
			if i%3 != 0 {
				r.key = []byte(fmt.Sprint("k", i%4))
			}
			if i%2 == 0 {
				r.headers = map[string][]byte{"n": []byte(fmt.Sprint(i))}
			}
			return r
		}),
		many(store.CopyMinRecords, func(i int) parityRecord {
			r := parityRecord{partition: 0, ts: at(10 + i), value: odd}
			switch i % 4 {
			case 0:
				r.value = nil
			case 1:
				r.value, r.key = []byte{}, []byte{}
			case 2:
				r.key = odd
			}
			return r
		}),
		// Routed by key: a few (direct) and many (COPY) per partition.
		many(7, func(i int) parityRecord {
			return parityRecord{partition: -1, key: []byte(fmt.Sprint("customer-", i)), value: []byte(fmt.Sprint(i))}
		}),
		many(60, func(i int) parityRecord {
			return parityRecord{partition: -1, key: []byte(fmt.Sprint("order-", i%11)), value: []byte(fmt.Sprint(i)), ts: at(i)}
		}),
	}

	goSide, sqlSide := openParitySchema(t, ctx), openParitySchema(t, ctx)
	var publishTimes []time.Time
	type answer struct {
		Partition   int32
		BaseOffset  int64
		RecordCount int32
	}
	for i, recs := range batches {
		// The Go client's forms, one partition's batch each.
		byPartition := map[int32][]parityRecord{}
		var order []int32
		for _, r := range recs {
			p := r.partition
			if p < 0 {
				p = logpublish.PartitionForKey(r.key, parityPartitions)
			}
			if _, ok := byPartition[p]; !ok {
				order = append(order, p)
			}
			byPartition[p] = append(byPartition[p], r)
		}
		gotGo := map[int32]answer{}
		for _, p := range order {
			b := parityBatch(t, parityTopic, p, byPartition[p])
			var res *store.PublishResult
			var err error
			form := "direct statement"
			if len(b.Values) < store.CopyMinRecords {
				res, err = goSide.s.PublishDirect(ctx, goSide.b.Pool, b)
			} else {
				form = "COPY"
				if !b.CopyEligible() {
					t.Fatalf("batch %d partition %d: not eligible for COPY", i, p)
				}
				res, err = goSide.s.PublishCopy(ctx, goSide.b.Pool, goSide.ids[parityTopic], b)
			}
			if err != nil || res == nil {
				t.Fatalf("batch %d partition %d: the %s published %+v, %v", i, p, form, res, err)
			}
			gotGo[p] = answer{res.Partition, res.BaseOffset, res.RecordCount}
			publishTimes = append(publishTimes, res.Timestamp)
		}
		// publish(): the batch as given (one partition's), or routed by
		// publish() when it gives no partition.
		var rows []store.PublishResult
		var err error
		if recs[0].partition < 0 {
			rows, err = publishRouted(ctx, sqlSide, recs)
		} else {
			rows, err = sqlSide.s.Publish(ctx, sqlSide.b.Pool, parityBatch(t, parityTopic, recs[0].partition, recs), false)
		}
		if err != nil {
			t.Fatalf("batch %d: publish(): %v", i, err)
		}
		gotSQL := map[int32]answer{}
		for _, r := range rows {
			gotSQL[r.Partition] = answer{r.Partition, r.BaseOffset, r.RecordCount}
			publishTimes = append(publishTimes, r.Timestamp)
		}
		if !reflect.DeepEqual(gotGo, gotSQL) {
			t.Fatalf("batch %d answers:\nGo client %+v\npublish() %+v", i, gotGo, gotSQL)
		}
	}
	var given []time.Time
	for _, recs := range batches {
		for _, r := range recs {
			if !r.ts.IsZero() {
				given = append(given, r.ts)
			}
		}
	}
	goRecs, sqlRecs := parityTable(t, ctx, goSide, given, publishTimes), parityTable(t, ctx, sqlSide, given, publishTimes)
	if len(goRecs) == 0 || !reflect.DeepEqual(goRecs, sqlRecs) {
		t.Fatalf("records:\nGo client %q\npublish() %q", goRecs, sqlRecs)
	}

	// What the Go forms leave to publish(): nothing stored, no offset taken.
	big := bytes.Repeat([]byte("x"), 11)
	for _, tc := range []struct {
		topic string
		value []byte
	}{{"lag", []byte("v")}, {"small", big}, {"nosuch", []byte("v")}} {
		one := parityBatch(t, tc.topic, 0, []parityRecord{{partition: 0, value: tc.value}})
		if res, err := goSide.s.PublishDirect(ctx, goSide.b.Pool, one); err != nil || res != nil {
			t.Fatalf("topic %s: the direct statement published %+v, %v", tc.topic, res, err)
		}
		id, ok := goSide.ids[tc.topic]
		if !ok {
			continue // COPY needs the topic's id: the client looks it up first
		}
		copyBatch := parityBatch(t, tc.topic, 0, many(store.CopyMinRecords, func(int) parityRecord { return parityRecord{partition: 0, value: tc.value} }))
		if res, err := goSide.s.PublishCopy(ctx, goSide.b.Pool, id, copyBatch); err != nil || res != nil {
			t.Fatalf("topic %s: COPY published %+v, %v", tc.topic, res, err)
		}
	}
	var stored int
	fq := pgx.Identifier{goSide.b.Schema}.Sanitize()
	if err := goSide.b.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+fq+`.record r JOIN `+fq+`.topic t USING (topic_id) WHERE t.name <> $1)
		+ (SELECT coalesce(sum(c.next_offset), 0) FROM `+fq+`.topic_partition c JOIN `+fq+`.topic t USING (topic_id) WHERE t.name <> $1)`,
		parityTopic).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 0 {
		t.Fatalf("the declined publishes stored records or took offsets (%d)", stored)
	}
}

// publishRouted calls publish() with recs and no partition: publish()
// routes each record itself.
func publishRouted(ctx context.Context, ps *paritySchema, recs []parityRecord) ([]store.PublishResult, error) {
	values, keys := make([][]byte, len(recs)), make([][]byte, len(recs))
	var stamps []*time.Time
	for i, r := range recs {
		values[i], keys[i] = r.value, r.key
		if !r.ts.IsZero() {
			if stamps == nil {
				stamps = make([]*time.Time, len(recs))
			}
			stamps[i] = &recs[i].ts
		}
	}
	rows, err := ps.b.Pool.Query(ctx, `SELECT partition, base_offset, record_count, "timestamp" FROM `+
		pgx.Identifier{ps.b.Schema}.Sanitize()+`.publish($1, $2, $3, NULL, $4, NULL, false)`,
		parityTopic, values, keys, stamps)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.PublishResult, error) {
		var out store.PublishResult
		return out, r.Scan(&out.Partition, &out.BaseOffset, &out.RecordCount, &out.Timestamp)
	})
}

// parityTable returns topic t's records as stored, one line each, by
// partition and offset: a timestamp the batch gave as it is, a publish
// time as "publish time" (and anything else as it is, which fails the
// comparison).
func parityTable(t *testing.T, ctx context.Context, ps *paritySchema, given, publishTimes []time.Time) []string {
	t.Helper()
	fq := pgx.Identifier{ps.b.Schema}.Sanitize()
	rows, err := ps.b.Pool.Query(ctx, `SELECT r.partition, r."offset", coalesce(pg_catalog.encode(r.key, 'hex'), '<null>'),
	        coalesce(pg_catalog.encode(r.value, 'hex'), '<null>'), coalesce(r.headers::text, '<null>'),
	        CASE WHEN r."timestamp" = ANY ($2::timestamptz[]) THEN r."timestamp"::text
	             WHEN r."timestamp" = ANY ($3::timestamptz[]) THEN 'publish time' ELSE r."timestamp"::text END,
	        r.byte_position IS NULL
	   FROM `+fq+`.record r JOIN `+fq+`.topic t USING (topic_id)
	  WHERE t.name = $1 ORDER BY r.partition, r."offset"`, parityTopic, given, publishTimes)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%v", vals))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
