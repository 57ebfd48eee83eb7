package logread

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// A claim's epoch fences commit, release and extend, so it must
// not be computable by another client of the group. Epochs were
// greatest(previous + 1, claim time in microseconds): this checks that no
// claim's epoch is near either, on the direct statements (claim, and
// commit-and-claim) and on claim_range (alone, riding a commit, after a
// release), and that each is a positive value exact in JSON.
func TestClaimEpochsUnguessable(t *testing.T) {
	t.Parallel()
	c := newTestReader(t)
	b, ctx := c.b, c.ctx
	s := pgx.Identifier{b.Schema}.Sanitize()
	c.createTopic("t", 1, 0)
	recs := make([]*pgmsgtype.Record, 40)
	for i := range recs {
		recs[i] = &pgmsgtype.Record{Topic: "t", Value: []byte{byte(i)}}
	}
	c.publish("t", 0, recs)
	c.join("t", "direct", "m")

	// stored is the cursor row's epoch (the previous claim's, or what a
	// release left); nowUS the database clock in microseconds.
	stored := func(group string) int64 {
		var e int64
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT claim_epoch FROM `+s+`.group_cursor WHERE group_name = $1 AND partition = 0`,
			group).Scan(&e))
		return e
	}
	nowUS := func() int64 {
		var us int64
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`).Scan(&us))
		return us
	}
	const near = int64(1e9) // 17 minutes of microseconds; a random 53-bit value lands this near with p ~ 2e-7
	check := func(how string, prev, before, epoch int64) {
		t.Helper()
		require.Positive(t, epoch, how)
		require.LessOrEqual(t, epoch, int64(1)<<53-1, "%s: not exact in JSON", how)
		require.NotEqual(t, prev, epoch, "%s: the previous epoch again", how)
		require.False(t, abs(epoch-(prev+1)) < near, "%s: epoch %d is next to the previous one, %d", how, epoch, prev)
		require.False(t, abs(epoch-before) < near, "%s: epoch %d is next to the clock, %d us", how, epoch, before)
	}

	params := func(commit int64) *store.ClaimParams {
		partition := int32(0)
		p := &store.ClaimParams{Topic: "t", Group: "direct", MaxRecords: 1, Lease: 30 * time.Second,
			Partition: &partition, Member: "m", RequireOwner: true}
		if commit != 0 {
			p.Commit, p.CommitPartition, p.CommitEpoch = true, 0, commit
		}
		return p
	}
	var held int64
	for i := range 8 {
		prev, before := stored("direct"), nowUS()
		commit := int64(0)
		if i%2 == 1 {
			commit = held // commit the held claim and claim the next record in one statement
		} else if held != 0 {
			require.NoError(t, c.Commit(ctx, b.Pool, &pgmsgtype.Claim{Topic: "t", Group: "direct", Partition: 0, Epoch: held}, nil))
			prev = stored("direct")
		}
		p := params(commit)
		require.True(t, c.canClaimDirect(p))
		res, err := c.claimDirect(ctx, b.Pool, p, "")
		require.NoError(t, err)
		require.NotNil(t, res.row, "claim %d", i)
		check("direct claim", prev, before, res.row.ClaimEpoch)
		held = res.row.ClaimEpoch
	}

	// claim_range from SQL: alone, riding a commit, and after a release.
	claimRange := func(commit *int64) int64 {
		var e int64
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT claim_epoch FROM `+s+`.claim_range('t', 'sql', 1,
			p_commit_partition => 0, p_commit_epoch => $1)`, commit).Scan(&e))
		return e
	}
	held = 0
	for i := range 9 {
		var commit *int64
		switch {
		case i == 0:
		case i%3 == 1:
			commit = &held
		case i%3 == 2:
			_, err := b.Pool.Exec(ctx, `SELECT `+s+`.commit('t', 'sql', 0, $1)`, held)
			require.NoError(t, err)
		default:
			_, err := b.Pool.Exec(ctx, `SELECT `+s+`.release('t', 'sql', 0, $1)`, held)
			require.NoError(t, err)
		}
		prev, before := int64(0), nowUS()
		if i > 0 {
			prev = stored("sql")
		}
		held = claimRange(commit)
		check("claim_range", prev, before, held)
	}
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
