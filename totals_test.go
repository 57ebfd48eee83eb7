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
	// read), and the kind of read it made with want: "full", "partial", or
	// "not full" where nothing of the four tables changed. That may be
	// "same snapshot" (nothing committed since the last read), "none"
	// (only transactions that wrote none of the tables) or "partial": the
	// tests of other packages commit on the same cluster, so the last
	// read's snapshot may have had older transactions in progress, and
	// rows of transactions at or after its xmin are read again.
	check := func(step, want string) {
		t.Helper()
		f0, p0, s0 := pgmsg.TotalsReads(tb.client)
		gotT, gotG, err := tb.client.LogTotals(tb.ctx)
		require.NoError(t, err, step)
		f1, p1, s1 := pgmsg.TotalsReads(tb.client)
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
		case s1 > s0:
			kind = "same snapshot"
		}
		switch want {
		case "not full":
			require.NotEqual(t, "full", kind, step)
		case "full or partial":
			require.Contains(t, []string{"full", "partial"}, kind, step)
		default:
			require.Equal(t, want, kind, step)
		}
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
	check("unchanged", "not full")
	// A transaction that writes elsewhere moves the snapshot: the scan
	// finds no row of the four tables written.
	_, err := tb.Pool.Exec(tb.ctx, "SELECT pg_catalog.pg_current_xact_id()")
	require.NoError(t, err)
	check("another table written", "not full")

	var recs []*pgmsg.Record
	for range 100 {
		recs = append(recs, &pgmsg.Record{Topic: "t1", Value: []byte("x")})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	waitSegments()
	check("publish", "partial")
	check("unchanged after publish", "not full")

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
	// again; the deleted one's are not. The cursor count shows it (a full
	// read), unless the deleted group's topic was read again anyway (its
	// rows newer than the last read's xmin, see check).
	_, err = tb.client.DeleteGroup(tb.ctx, "t0", "g")
	require.NoError(t, err)
	_, err = tb.client.CreateGroup(tb.ctx, "t2", "g2", pgmsg.PositionEarliest)
	require.NoError(t, err)
	check("group deleted, another created", "full or partial")

	require.NoError(t, tb.client.DeleteTopic(tb.ctx, "t3"))
	check("topic deleted", "full or partial")

	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("UPDATE %s SET name = 'renamed' WHERE name = 't2'",
		pgx.Identifier{tb.Schema, "topic"}.Sanitize()))
	require.NoError(t, err)
	check("topic row rewritten", "partial")
	check("unchanged at the end", "not full")
}
