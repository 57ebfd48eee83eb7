package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// deleteTopicUnder deletes topic in a transaction of its own, runs op
// concurrently, waits until op's session is blocked on a lock the delete
// holds, then commits the delete and returns op's error.
func (tb *testBundle) deleteTopicUnder(t *testing.T, topic string, op func(ctx context.Context) error) error {
	t.Helper()
	tx, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	defer tx.Rollback(tb.ctx)
	_, err = tx.Exec(tb.ctx, tb.sqlAPI(`SELECT {s}.topic_delete($1, true)`), topic)
	require.NoError(t, err)
	var deleter int
	require.NoError(t, tx.QueryRow(tb.ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&deleter))

	done := make(chan error, 1)
	go func() { done <- op(tb.ctx) }()
	waitFor(t, 30*time.Second, "the operation to wait for the delete's locks", func() bool {
		var n int
		require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))`, deleter).Scan(&n))
		return n > 0
	})
	require.NoError(t, tx.Commit(tb.ctx))
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the operation did not return after the delete committed")
		return nil
	}
}

// A publish that looked its topic up just before a concurrent delete
// committed fails with ErrUnknownTopic (PM001; HTTP 404), not with
// PostgreSQL's "no partition of relation record found for row" (HTTP 500).
// Found by the HTTP property test.
func TestPublishRacingTopicDeleteIsUnknownTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.topic(t, "t", 1)
	require.NoError(t, b.client.Publish(b.ctx, []*pgmsg.Record{{Topic: "t", Value: []byte("warm the topic cache")}}, nil))
	err := b.deleteTopicUnder(t, "t", func(ctx context.Context) error {
		return b.client.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte("v")}}, nil)
	})
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
	require.Equal(t, "PM001", pgmsg.ErrorCode(err))
}

// segment_ensure (background segment creation) waiting for the segment
// lock of a topic being deleted answers PM001, or -1 (busy, when its 200 ms
// lock_timeout ran out first), never 42P01 (undefined table).
func TestSegmentEnsureRacingTopicDeleteIsUnknownTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.topic(t, "t", 1)
	var got int
	err := b.deleteTopicUnder(t, "t", func(ctx context.Context) error {
		return b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT {s}.segment_ensure('t', 0)`)).Scan(&got)
	})
	var pgErr *pgconn.PgError
	if err == nil {
		require.Equal(t, -1, got, "segment_ensure succeeded on a deleted topic")
		return
	}
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "PM001", pgErr.Code, "%v", err)
}

func TestTopicAdmin(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	topic, err := tb.client.CreateTopic(tb.ctx, "orders.v1", pgmsg.TopicConfig{Partitions: 3, SegmentRecords: 32,
		Settings: map[string]any{"retention_ms": 3600000}})
	require.NoError(t, err)
	require.Equal(t, 3, topic.Partitions)
	require.Equal(t, int64(32), topic.SegmentRecords)
	require.Equal(t, float64(3600000), topic.Settings["retention_ms"])

	_, err = tb.client.CreateTopic(tb.ctx, "orders.v1", pgmsg.TopicConfig{Partitions: 1})
	require.ErrorIs(t, err, pgmsg.ErrTopicExists)
	require.Equal(t, "PM002", pgmsg.ErrorCode(err))

	// 100 records to partition 2 span several 32-record segments, created as needed.
	var recs []*pgmsg.Record
	for i := 0; i < 100; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "orders.v1", Partition: 2, Value: make([]byte, 100)})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	desc, err := tb.client.DescribeTopic(tb.ctx, "orders.v1")
	require.NoError(t, err)
	require.Len(t, desc.PartitionInfo, 3)
	p2 := desc.PartitionInfo[2]
	require.Equal(t, int64(100), p2.NextOffset)
	require.Equal(t, int64(100), p2.Records)
	require.GreaterOrEqual(t, p2.Segments, 4)
	require.Greater(t, p2.ApproxBytes, int64(10000))

	// A group created before new partitions reads them from their start.
	_, err = tb.client.CreateGroup(tb.ctx, "orders.v1", "early", pgmsg.PositionLatest)
	require.NoError(t, err)
	topic, err = tb.client.AddPartitions(tb.ctx, "orders.v1", 5)
	require.NoError(t, err)
	require.Equal(t, 5, topic.Partitions)
	_, err = tb.client.AddPartitions(tb.ctx, "orders.v1", 4)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "orders.v1", Partition: 4, Value: []byte("new")}},
		&pgmsg.PublishOpts{ManualPartition: true}))
	cl, err := tb.client.Claim(tb.ctx, "orders.v1", "early", nil)
	require.NoError(t, err)
	require.Equal(t, int32(4), cl.Partition)
	require.Equal(t, "new", string(cl.Records[0].Value))

	topics, err := tb.client.ListTopics(tb.ctx)
	require.NoError(t, err)
	require.Len(t, topics, 1)
	require.NoError(t, tb.client.DeleteTopic(tb.ctx, "orders.v1"))
	topics, err = tb.client.ListTopics(tb.ctx)
	require.NoError(t, err)
	require.Empty(t, topics)
	require.ErrorIs(t, tb.client.DeleteTopic(tb.ctx, "orders.v1"), pgmsg.ErrUnknownTopic)
	// Dropping the topic dropped its tables.
	var tables int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname ~ '^record_[0-9]'`,
		tb.Schema).Scan(&tables))
	require.Zero(t, tables)
}

// Hostile names never reach SQL as code: the Go validator and the SQL API
// (called directly, bypassing Go) both reject them, and nothing is created.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	hostile := []string{
		"", `x"; DROP TABLE record; --`, "a'b", "a b", "tab\tname", "ünïcødé", "semi;colon",
		"$$ LANGUAGE sql $$", "a/b", "../../etc", "null\x00byte", strings.Repeat("b", 201),
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	}
	fn := pgx.Identifier{tb.Schema, "topic_create"}.Sanitize()
	for _, name := range hostile {
		_, err := tb.client.CreateTopic(tb.ctx, name, pgmsg.TopicConfig{})
		require.ErrorIs(t, err, pgmsg.ErrInvalidName, "name %q", name)
		if strings.ContainsRune(name, 0) {
			continue // PostgreSQL text cannot hold NUL at all
		}
		_, err = tb.Pool.Exec(tb.ctx, "SELECT "+fn+"($1, 1)", name)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "name %q", name)
		require.Equal(t, "PM003", pgErr.Code, "name %q", name)
	}
	// Valid names with every allowed character work.
	for _, name := range []string{"a", "A.b_c-9", string(make200('z'))} {
		_, err := tb.client.CreateTopic(tb.ctx, name, pgmsg.TopicConfig{})
		require.NoError(t, err, "name %q", name)
		require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: name, Value: []byte("v")}}, nil))
	}
	topics, err := tb.client.ListTopics(tb.ctx)
	require.NoError(t, err)
	require.Len(t, topics, 3)
}

// nameRE is the documented rule for topic, group and queue names.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

// FuzzValidateName: the Go check and the SQL check (valid_name, the
// authority) agree on every string, and the Go check matches the
// documented rule.
func FuzzValidateName(f *testing.F) {
	for _, s := range pgtest.Hostile {
		f.Add(s)
	}
	tb := setup(f, nil)
	sql := fmt.Sprintf(`SELECT %s.valid_name($1)`, pgx.Identifier{tb.Schema}.Sanitize())
	f.Fuzz(func(t *testing.T, name string) {
		goOK := pgmsg.ValidateName("topic", name) == nil
		if goOK != nameRE.MatchString(name) {
			t.Fatalf("ValidateName(%q) = %v, rule says %v", name, goOK, !goOK)
		}
		if !goOK && !errors.Is(pgmsg.ValidateName("topic", name), pgmsg.ErrInvalidName) {
			t.Fatalf("ValidateName(%q): error is not ErrInvalidName", name)
		}
		if !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
			return // PostgreSQL text cannot hold it; the Go check already refused it
		}
		var sqlOK bool
		if err := tb.Pool.QueryRow(context.Background(), sql, name).Scan(&sqlOK); err != nil {
			t.Fatalf("valid_name(%q): %v", name, err)
		}
		if sqlOK != goOK {
			t.Fatalf("name %q: Go says %v, SQL says %v", name, goOK, sqlOK)
		}
	})
}
