package pgmsg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// claim_range from plain SQL: the claim names the segment that holds it, a
// commit can ride on the next claim (one row version when it is the same
// partition), and a riding commit of a claim no longer held rolls the whole
// call back with PM009.
func TestClaimRangeSQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	q := func(sql string) string { return fmt.Sprintf(sql, s) }
	_, err := tb.Pool.Exec(tb.ctx, q(`SELECT %s.topic_create('cr', 1)`))
	require.NoError(t, err)
	_, err = tb.Pool.Exec(tb.ctx, q(`SELECT %s.publish('cr', ARRAY['a','b','c','d','e']::bytea[], p_partition => 0)`))
	require.NoError(t, err)

	type claimRow struct {
		part        int32
		epoch       int64
		first, last int64
		topicID     int32
		rel         *string
	}
	claim := func(max int, commitEpoch *int64) (*claimRow, error) {
		var r claimRow
		err := tb.Pool.QueryRow(tb.ctx, q(`SELECT partition, claim_epoch, first_offset, last_offset, topic_id, relname
			FROM %s.claim_range('cr', 'g', $1, p_commit_partition => 0, p_commit_epoch => $2)`), max, commitEpoch).
			Scan(&r.part, &r.epoch, &r.first, &r.last, &r.topicID, &r.rel)
		if err == pgx.ErrNoRows {
			return nil, nil
		}
		return &r, err
	}
	c1, err := claim(2, nil)
	require.NoError(t, err)
	require.Equal(t, int64(0), c1.first)
	require.Equal(t, int64(1), c1.last)
	require.NotNil(t, c1.rel)
	var values []string
	rows, err := tb.Pool.Query(tb.ctx, fmt.Sprintf(`SELECT convert_from(value, 'UTF8') FROM %s.%s
		WHERE topic_id = $1 AND partition = $2 AND "offset" BETWEEN $3 AND $4 ORDER BY "offset"`, s, pgx.Identifier{*c1.rel}.Sanitize()),
		c1.topicID, c1.part, c1.first, c1.last)
	require.NoError(t, err)
	values, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, values)

	// Commit c1 and claim the next two in one call.
	c2, err := claim(2, &c1.epoch)
	require.NoError(t, err)
	require.Equal(t, int64(2), c2.first)
	require.Equal(t, int64(3), c2.last)
	require.NotEqual(t, c1.epoch, c2.epoch)

	// c1 is committed: riding it again fails with PM009 and claims nothing.
	_, err = claim(2, &c1.epoch)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "PM009", pgErr.Code)
	// The live claim's epoch is its fencing token: never in an error.
	require.NotContains(t, pgErr.Message, fmt.Sprint(c2.epoch))
	err = tb.client.Commit(tb.ctx, &pgmsg.Claim{Topic: "cr", Group: "g", Partition: 0, Epoch: c1.epoch})
	require.ErrorIs(t, err, pgmsg.ErrClaimNotHeld)
	require.NotContains(t, err.Error(), fmt.Sprint(c2.epoch))
	gs, err := tb.client.ListGroups(tb.ctx, "cr", "g")
	require.NoError(t, err)
	require.Equal(t, int64(2), gs[0].NextOffset)
	require.Equal(t, c2.epoch, gs[0].ClaimEpoch)

	// Commit c2 with the last record left: the claim goes on from 4.
	c3, err := claim(10, &c2.epoch)
	require.NoError(t, err)
	require.Equal(t, int64(4), c3.first)
	require.Equal(t, int64(4), c3.last)
	// Commit c3 with nothing left to read: committed, no claim.
	c4, err := claim(10, &c3.epoch)
	require.NoError(t, err)
	require.Nil(t, c4)
	gs, err = tb.client.ListGroups(tb.ctx, "cr", "g")
	require.NoError(t, err)
	require.Equal(t, int64(5), gs[0].NextOffset)
	require.Zero(t, gs[0].Lag)
	require.Empty(t, gs[0].ClaimOwner)
}

// Consumer.Run commits a handled claim along with the next claim, and the
// last claim when Run returns: every record is handled once and the group
// ends with no lag.
func TestConsumerRunCommitsLastClaimOnExit(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "runexit", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	recs := make([]*pgmsg.Record, 25)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "runexit", Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))

	cn, err := tb.client.NewConsumer("runexit", "g", &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: 3}})
	require.NoError(t, err)
	defer cn.Close()
	ctx, cancel := context.WithCancel(tb.ctx)
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range cl.Records {
				seen[string(r.Value)]++
			}
			if len(seen) == len(recs) {
				cancel()
			}
			return nil
		})
	}()
	requireRunHandledOnce(t, tb, done, seen, len(recs), "runexit")
}

// requireRunHandledOnce waits for Run's result on done (it must end with
// context.Canceled, the handler having cancelled it once every record
// was seen), then checks that want records were each handled once and
// that the group g of topic has no lag left.
func requireRunHandledOnce(t *testing.T, tb *testBundle, done <-chan error, seen map[string]int, want int, topic string) {
	t.Helper()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Minute):
		t.Fatal("Run did not read every record")
	}
	require.Len(t, seen, want)
	for v, n := range seen {
		require.Equal(t, 1, n, "record %s handled %d times", v, n)
	}
	gs, err := tb.client.ListGroups(tb.ctx, topic, "g")
	require.NoError(t, err)
	for _, g := range gs {
		require.Zero(t, g.Lag, "partition %d", g.Partition)
	}
}

// A first Poll whose context ends during the group join does not break the
// consumer: the next Poll joins and claims.
func TestConsumerStartRetriedAfterFailedFirstPoll(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "retrystart", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "retrystart", Value: []byte("x")}}, nil))
	cn, err := tb.client.NewConsumer("retrystart", "g", nil)
	require.NoError(t, err)
	defer cn.Close()
	dead, cancel := context.WithCancel(tb.ctx)
	cancel()
	_, err = cn.Poll(dead)
	require.ErrorIs(t, err, context.Canceled)
	ctx, cancel2 := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel2()
	cl, err := cn.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, cl.Records, 1)
	require.NoError(t, tb.client.Commit(tb.ctx, cl))
}
