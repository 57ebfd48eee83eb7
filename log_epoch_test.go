package pgmsg_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A failover to a standby that lacked the last records, played on one
// server: the records from offset 6 on are deleted, the partition's
// counter set back, a group's cursor set back (its commits were lost too)
// and the partition's timeline made another than the server's, as on a
// promoted standby. The next publish starts a new log epoch at offset 6.
// A client whose group had been given offsets past 6 gets ErrLogTruncated
// on its next claim instead of the new records at those offsets (with
// claim_range() and with the direct statements of a Consumer), and goes on
// when it claims again; a group that had been given nothing past 6 goes on
// without an error.
func TestLogTruncatedByFailover(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "lt", 1)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	var recs []*pgmsg.Record
	for i := range 10 {
		recs = append(recs, &pgmsg.Record{Topic: "lt", Value: fmt.Appendf(nil, "old-%d", i)})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))

	p0 := int32(0)
	claimAll := func(group string, max int) *pgmsg.Claim {
		cl, err := tb.client.Claim(tb.ctx, "lt", group, &pgmsg.ClaimOpts{Partition: &p0, MaxRecords: max})
		require.NoError(t, err)
		require.NotNil(t, cl)
		require.NoError(t, tb.client.Commit(tb.ctx, cl))
		return cl
	}
	claimAll("seen-all", 100) // given 0..9
	claimAll("seen-some", 6)  // given 0..5
	cons, err := tb.client.NewConsumer("lt", "direct", nil)
	require.NoError(t, err)
	t.Cleanup(cons.Close)
	cl, err := cons.Poll(tb.ctx)
	require.NoError(t, err)
	require.Len(t, cl.Records, 10)
	require.NoError(t, tb.client.Commit(tb.ctx, cl))

	// The failover: offsets 6.. lost, the groups' last commits too.
	var topicID int32
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT topic_id FROM %s.topic WHERE name = 'lt'`, s)).Scan(&topicID))
	for _, q := range []string{
		`DELETE FROM %s.record WHERE topic_id = $1 AND "offset" >= 6`,
		`UPDATE %s.topic_partition SET next_offset = 6, log_timeline = log_timeline + 1000 WHERE topic_id = $1`,
		`UPDATE %s.group_cursor SET next_offset = least(next_offset, 4) WHERE topic_id = $1`,
	} {
		_, err := tb.Pool.Exec(tb.ctx, fmt.Sprintf(q, s), topicID)
		require.NoError(t, err)
	}
	// The new primary's first publish starts epoch >= 1 at offset 6.
	recs = recs[:0]
	for i := 6; i < 9; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "lt", Value: fmt.Appendf(nil, "new-%d", i)})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	var epoch int32
	var start int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT epoch, start_offset FROM %s.log_epoch WHERE topic_id = $1`, s),
		topicID).Scan(&epoch, &start))
	require.GreaterOrEqual(t, epoch, int32(1))
	require.Equal(t, int64(6), start)
	var end int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT end_offset FROM %s.log_epoch_end('lt', 0, 0)`, s)).Scan(&end))
	require.Equal(t, int64(6), end)
	var events int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT count(*) FROM %s.maintenance_event WHERE kind = 'log_epoch'`, s)).Scan(&events))
	require.Equal(t, 1, events)

	values := func(cl *pgmsg.Claim) []string {
		var out []string
		for _, r := range cl.Records {
			out = append(out, string(r.Value))
		}
		return out
	}
	want := []string{"old-4", "old-5", "new-6", "new-7", "new-8"}

	// The group that was given 6..9: the error, nothing handed over, then on.
	_, err = tb.client.Claim(tb.ctx, "lt", "seen-all", &pgmsg.ClaimOpts{Partition: &p0})
	require.ErrorIs(t, err, pgmsg.ErrLogTruncated)
	require.Equal(t, "PM020", pgmsg.ErrorCode(err))
	require.ErrorContains(t, err, "offsets 6 to 9")
	cl = claimAll("seen-all", 100)
	require.Equal(t, want, values(cl))

	// The Consumer (direct statements): the same.
	_, err = cons.Poll(tb.ctx)
	require.True(t, errors.Is(err, pgmsg.ErrLogTruncated), "%v", err)
	cl, err = cons.Poll(tb.ctx)
	require.NoError(t, err)
	require.Equal(t, want, values(cl))

	// The group that was given only 0..5: nothing it saw was lost.
	cl = claimAll("seen-some", 100)
	require.Equal(t, want, values(cl))
}
