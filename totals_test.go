package pgmsg_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// LogTotals keeps its last answer and reads again only what was written
// since: after each kind of change (publish, commit, a new topic and group,
// a group deleted and another created, a topic deleted, a rename of the
// row's name by hand) it answers what a new client's full read answers,
// and it reads everything again only for deletions.
func TestLogTotalsIncremental(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for i := range 4 {
		tb.topic(t, fmt.Sprintf("t%d", i), 2)
		_, err := tb.client.CreateGroup(tb.ctx, fmt.Sprintf("t%d", i), "g", pgmsg.PositionEarliest)
		require.NoError(t, err)
	}
	// check compares tb.client's answer with a new client's (a full
	// read), and the kind of read it made with want ("full", "partial" or
	// "none").
	check := func(step, want string) {
		t.Helper()
		f0, p0 := pgmsg.TotalsReads(tb.client)
		gotT, gotG, err := tb.client.LogTotals(tb.ctx)
		require.NoError(t, err, step)
		f1, p1 := pgmsg.TotalsReads(tb.client)
		fresh, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema})
		require.NoError(t, err)
		defer fresh.Close()
		wantT, wantG, err := fresh.LogTotals(tb.ctx)
		require.NoError(t, err, step)
		require.Equal(t, wantT, gotT, step)
		require.Equal(t, wantG, gotG, step)
		kind := "none"
		switch {
		case f1 > f0:
			kind = "full"
		case p1 > p0:
			kind = "partial"
		}
		require.Equal(t, want, kind, step)
	}
	// waitSegments waits until the background creation of segments ahead
	// (after a publish) is done, so that it does not land between the two
	// reads of check.
	waitSegments := func() {
		t.Helper()
		var n, last int
		for range 100 {
			require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf("SELECT count(*) FROM %s",
				pgx.Identifier{tb.Schema, "segment"}.Sanitize())).Scan(&n))
			if n == last {
				return
			}
			last = n
			time.Sleep(50 * time.Millisecond)
		}
	}
	check("first", "full")
	check("unchanged", "none")

	var recs []*pgmsg.Record
	for range 100 {
		recs = append(recs, &pgmsg.Record{Topic: "t1", Value: []byte("x")})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	waitSegments()
	check("publish", "partial")
	check("unchanged after publish", "none")

	cl, err := tb.client.Claim(tb.ctx, "t1", "g", &pgmsg.ClaimOpts{MaxRecords: 10})
	require.NoError(t, err)
	require.NotEmpty(t, cl.Records)
	require.NoError(t, tb.client.Commit(tb.ctx, cl))
	check("commit", "partial")

	tb.topic(t, "t9", 3)
	_, err = tb.client.CreateGroup(tb.ctx, "t9", "h", pgmsg.PositionEarliest)
	require.NoError(t, err)
	check("new topic and group", "partial")

	// A group deleted and another of as many partitions created: the
	// counts balance, and the new group's rows are written rows, read
	// again; the deleted one's are not. The cursor count shows it.
	_, err = tb.client.DeleteGroup(tb.ctx, "t0", "g")
	require.NoError(t, err)
	_, err = tb.client.CreateGroup(tb.ctx, "t2", "g2", pgmsg.PositionEarliest)
	require.NoError(t, err)
	check("group deleted, another created", "full")

	require.NoError(t, tb.client.DeleteTopic(tb.ctx, "t3"))
	check("topic deleted", "full")

	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("UPDATE %s SET name = 'renamed' WHERE name = 't2'",
		pgx.Identifier{tb.Schema, "topic"}.Sanitize()))
	require.NoError(t, err)
	check("topic row rewritten", "partial")
	check("unchanged at the end", "none")
}
