package logread

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// newGatherReader is a reader on a schema of its own with topic "t" of
// one partition.
func newGatherReader(t *testing.T) *testReader {
	r := newTestReader(t)
	r.createTopic("t", 1, 0)
	return r
}

// createGroup creates topic "t"'s group g, from the earliest record.
func (r *testReader) createGroup(g string) {
	r.t.Helper()
	_, err := r.store.GroupCreate(r.ctx, r.b.Pool, "t", g, "earliest")
	require.NoError(r.t, err)
}

// publishValues appends n records to topic "t" valued prefix0, prefix1, ...
func (r *testReader) publishValues(prefix string, n int) {
	r.t.Helper()
	recs := make([]*pgmsgtype.Record, n)
	for i := range recs {
		recs[i] = &pgmsgtype.Record{Value: []byte(fmt.Sprint(prefix, i))}
	}
	r.publish("t", 0, recs)
}

// The gathered claim statement (store.ClaimGather) does, for each group,
// what the direct statements do: it claims for the partition's owner,
// commits a claim still held and claims on in the same row version, and
// leaves to the caller what it cannot settle (a claim no longer held, a
// member that does not own the partition, a group that does not exist),
// writing nothing for those. The records of a range claimed by several
// groups are read once.
func TestClaimGatherStatement(t *testing.T) {
	t.Parallel()
	r := newGatherReader(t)
	b, ctx := r.b, r.ctx
	for _, g := range []string{"a", "b", "c"} {
		r.createGroup(g)
	}
	tbl := func(name string) string { return pgx.Identifier{b.Schema, name}.Sanitize() }
	_, err := b.Pool.Exec(ctx, `UPDATE `+tbl("group_cursor")+` SET owner = 'm'`)
	require.NoError(t, err)
	publish := func(n int) { r.publishValues("v", n) }
	publish(5)
	var seg string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT relname FROM `+tbl("segment")+` ORDER BY start_offset LIMIT 1`).Scan(&seg))
	type cursor struct {
		next       int64
		epoch      *int64
		start, end *int64
	}
	cursorOf := func(g string) cursor {
		var cu cursor
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT next_offset, claim_epoch, claim_start, claim_end FROM `+tbl("group_cursor")+
			` WHERE group_name = $1`, g).Scan(&cu.next, &cu.epoch, &cu.start, &cu.end))
		return cu
	}
	gather := func(reqs ...store.ClaimGatherReq) ([]store.ClaimGatherResult, []int64) {
		t.Helper()
		var offsets []int64
		res, err := r.store.ClaimGather(ctx, b.Pool, "t", 0, seg, true, store.Held{}, reqs, func(row *store.RecordRow) error {
			offsets = append(offsets, row.Offset)
			return nil
		})
		require.NoError(t, err)
		require.Len(t, res, len(reqs))
		return res, offsets
	}
	req := func(g, member string) store.ClaimGatherReq {
		return store.ClaimGatherReq{Group: g, Member: member, MaxRecords: 10, Lease: time.Minute}
	}

	// Three owners claim the same five records: read once.
	res, offsets := gather(req("a", "m"), req("b", "m"), req("c", "m"), req("nope", "m"), req("a", "other"))
	require.ElementsMatch(t, []int64{0, 1, 2, 3, 4}, offsets, "one range, its records once")
	epochs := map[string]int64{}
	for i, g := range []string{"a", "b", "c"} {
		r := res[i]
		require.True(t, r.Settled, g)
		require.False(t, r.Committed, g)
		require.NotNil(t, r.Row, g)
		require.True(t, r.Fetched, g)
		require.Equal(t, int64(0), r.Row.FirstOffset, g)
		require.Equal(t, int64(4), r.Row.LastOffset, g)
		require.Equal(t, seg, r.Row.Relname, g)
		require.Positive(t, r.LSN, g)
		cu := cursorOf(g)
		require.Equal(t, r.Row.ClaimEpoch, *cu.epoch, g)
		require.Equal(t, int64(0), cu.next, g)
		epochs[g] = r.Row.ClaimEpoch
	}
	require.False(t, res[3].Settled, "a group that does not exist is left to claim_range()")
	// The fifth request names group a again with a member that does not
	// own the partition (a caller never sends one group twice): unsettled.
	require.False(t, res[4].Settled)
	require.Nil(t, res[4].Row)

	// a commits and claims on; b's claim to commit is not held (a wrong
	// epoch): nothing is done for it; c has no commit and its claim is
	// still leased: settled, nothing to claim.
	publish(3)
	bad := req("b", "m")
	bad.Commit, bad.CommitEpoch = true, epochs["b"]+1
	commitA := req("a", "m")
	commitA.Commit, commitA.CommitEpoch = true, epochs["a"]
	res, offsets = gather(commitA, bad, req("c", "m"))
	require.ElementsMatch(t, []int64{5, 6, 7}, offsets)
	require.True(t, res[0].Settled)
	require.True(t, res[0].Committed)
	require.NotNil(t, res[0].Row)
	require.Equal(t, int64(5), res[0].Row.FirstOffset)
	require.Equal(t, int64(7), res[0].Row.LastOffset)
	require.NotEqual(t, epochs["a"], res[0].Row.ClaimEpoch, "a new epoch fences the committed claim")
	require.Equal(t, int64(5), cursorOf("a").next)
	require.False(t, res[1].Settled)
	require.False(t, res[1].Committed)
	cb := cursorOf("b")
	require.Equal(t, int64(0), cb.next, "nothing written for an unsettled request")
	require.Equal(t, epochs["b"], *cb.epoch)
	require.True(t, res[2].Settled)
	require.Nil(t, res[2].Row)
	// The committed claim's epoch is no longer held: committing it again
	// through the reader fails as for any lost claim.
	require.ErrorIs(t, r.Commit(ctx, b.Pool, &pgmsgtype.Claim{Topic: "t", Group: "a", Partition: 0, Epoch: epochs["a"]}, nil), errs.ClaimNotHeld)

	// b commits its claim (the right epoch) and claims on: 5..7; c's
	// lease has not expired. a commits and finds nothing new: its claim
	// ends.
	okB := req("b", "m")
	okB.Commit, okB.CommitEpoch = true, epochs["b"]
	commitA.CommitEpoch = res[0].Row.ClaimEpoch
	res, offsets = gather(okB, commitA)
	require.ElementsMatch(t, []int64{5, 6, 7}, offsets)
	require.True(t, res[0].Settled)
	require.Equal(t, int64(5), res[0].Row.FirstOffset)
	require.Equal(t, int64(5), cursorOf("b").next)
	require.True(t, res[1].Settled)
	require.True(t, res[1].Committed)
	require.Nil(t, res[1].Row)
	ca := cursorOf("a")
	require.Equal(t, int64(8), ca.next)
	require.Nil(t, ca.start, "nothing claimed: the claim ended")
}

// The claim statements skip what the caller holds (store.Held): a claim
// that ends in the held range is read up to before it, one that starts
// in it from past its end, one inside it not at all, one that covers it
// at both ends whole; a range held of another topic changes nothing. Both
// the gathered and the direct statement, each as Held.Skipped says.
func TestClaimStatementsSkipHeld(t *testing.T) {
	t.Parallel()
	r := newGatherReader(t)
	b, ctx := r.b, r.ctx
	tbl := func(name string) string { return pgx.Identifier{b.Schema, name}.Sanitize() }
	r.publishValues("v", 10)
	// Where each group's claim starts, and how many records it may take.
	starts := map[string]int64{"ends": 0, "inside": 4, "starts": 5, "covers": 2, "other": 0, "direct": 1}
	maxes := map[string]int32{"ends": 5, "inside": 2, "starts": 5, "covers": 8, "other": 10, "direct": 4}
	for g, next := range starts {
		r.createGroup(g)
		_, err := b.Pool.Exec(ctx, `UPDATE `+tbl("group_cursor")+` SET owner = 'm', next_offset = $1 WHERE group_name = $2`, next, g)
		require.NoError(t, err)
	}
	var seg string
	var tid int32
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT relname, topic_id FROM `+tbl("segment")+` ORDER BY start_offset LIMIT 1`).Scan(&seg, &tid))
	held := store.Held{TopicID: tid, First: 3, Last: 6}

	// read returns the offsets the gathered statement handed over, sorted.
	read := func(h store.Held, groups ...string) []int64 {
		t.Helper()
		var offsets []int64
		var reqs []store.ClaimGatherReq
		for _, g := range groups {
			reqs = append(reqs, store.ClaimGatherReq{Group: g, Member: "m", MaxRecords: maxes[g], Lease: time.Minute})
		}
		res, err := r.store.ClaimGather(ctx, b.Pool, "t", 0, seg, true, h, reqs, func(row *store.RecordRow) error {
			offsets = append(offsets, row.Offset)
			return nil
		})
		require.NoError(t, err)
		for i, r := range res {
			require.True(t, r.Settled, groups[i])
			require.NotNil(t, r.Row, groups[i])
			require.True(t, r.Fetched, groups[i])
			require.Equal(t, starts[groups[i]], r.Row.FirstOffset, groups[i])
		}
		slices.Sort(offsets)
		return offsets
	}
	skipped := func(first, last int64) []int64 {
		lo, hi, ok := held.Skipped(tid, first, last)
		if !ok {
			return nil
		}
		return []int64{lo, hi}
	}

	require.Equal(t, []int64{0, 1, 2}, read(held, "ends"), "0..4 ends in 3..6")
	require.Equal(t, []int64{3, 4}, skipped(0, 4))
	require.Empty(t, read(held, "inside"), "4..5 is inside 3..6")
	require.Equal(t, []int64{4, 5}, skipped(4, 5))
	require.Equal(t, []int64{7, 8, 9}, read(held, "starts"), "5..9 starts in 3..6")
	require.Equal(t, []int64{5, 6}, skipped(5, 9))
	require.Equal(t, []int64{2, 3, 4, 5, 6, 7, 8, 9}, read(held, "covers"), "2..9 covers 3..6 at both ends")
	require.Nil(t, skipped(2, 9))
	other := store.Held{TopicID: tid + 1, First: 3, Last: 6}
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, read(other, "other"), "another topic's range")
	_, _, ok := other.Skipped(tid, 0, 9)
	require.False(t, ok)

	// The direct statement: 1..4 ends in 3..6.
	part := int32(0)
	var offsets []int64
	res, err := r.store.ClaimDirect(ctx, b.Pool, &store.ClaimParams{Topic: "t", Group: "direct", Partition: &part, Member: "m",
		MaxRecords: maxes["direct"], Lease: time.Minute}, seg, held, func(row *store.RecordRow) error {
		offsets = append(offsets, row.Offset)
		return nil
	})
	require.NoError(t, err)
	require.NotNil(t, res.Row)
	require.True(t, res.Fetched)
	require.Equal(t, int64(1), res.Row.FirstOffset)
	require.Equal(t, int64(4), res.Row.LastOffset)
	require.Equal(t, []int64{1, 2}, offsets)
	require.Equal(t, []int64{3, 4}, skipped(1, 4))
}
