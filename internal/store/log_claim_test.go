package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// The consumer's claim has three forms: the direct claim statements
// (claimDirectSQL, and claimCommitDirectSQL that commits the previous
// claim and claims the next; ClaimDirect), the gathered claim
// (claimGatherSQL, log_claim_gather.go; ClaimGather) and claim_range()
// (ClaimRange). On three schemas with the same topic, group and records,
// the same claims must claim the same ranges (in the same segment tables,
// across a segment boundary too), say the same when there is nothing to
// claim, and leave the cursor row alike: next offset, claim range, owner,
// lease, a new epoch per claim, commit time.
func TestClaimParity(t *testing.T) {
	ctx := context.Background()
	type setup struct {
		b *pgtest.Bundle
		s *Store
	}
	publish := func(st setup, n int) {
		t.Helper()
		b := NewPublishBatch("t", 0, n)
		for i := range b.Values {
			b.Values[i] = []byte(fmt.Sprint(i))
		}
		if _, err := st.s.Publish(ctx, st.b.Pool, &b, false); err != nil {
			t.Fatal(err)
		}
	}
	open := func() setup {
		b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
		st := setup{b, New(b.Schema)}
		if _, err := st.s.TopicCreate(ctx, b.Pool, "t", 2, []byte(`{"segment_records": 16}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Pool.Exec(ctx, `SELECT * FROM `+pgx.Identifier{b.Schema}.Sanitize()+`.group_heartbeat('t', 'g', 'm')`); err != nil {
			t.Fatal(err)
		}
		publish(st, 5)
		return st
	}
	// cursor is the cursor row of partition 0 without what differs by
	// draw or clock: whether the claim epoch changed since the last look.
	prev := map[*pgtest.Bundle]int64{}
	cursor := func(b *pgtest.Bundle) string {
		t.Helper()
		var row string
		var epoch int64
		if err := b.Pool.QueryRow(ctx, `SELECT pg_catalog.concat_ws(' ', next_offset, coalesce(claim_start::text, '-'),
		        coalesce(claim_end::text, '-'), coalesce(owner, '-'), coalesce(next_owner, '-'), coalesce(claim_owner, '-'),
		        coalesce((claim_expires_at - claimed_at)::text, '-'), claimed_at IS NOT NULL, committed_at IS NOT NULL),
		        coalesce(claim_epoch, 0)
		   FROM `+pgx.Identifier{b.Schema, "group_cursor"}.Sanitize()+` WHERE group_name = 'g' AND partition = 0`).Scan(
			&row, &epoch); err != nil {
			t.Fatal(err)
		}
		row += fmt.Sprintf(" epoch set %v, new %v", epoch != 0, epoch != prev[b])
		prev[b] = epoch
		return row
	}
	norm := claimOf
	show := func(c *claimShape) string {
		if c == nil {
			return "none"
		}
		return fmt.Sprintf("%+v", *c)
	}

	direct, fn, gather := open(), open(), open()
	var epochD, epochF, epochG int64 // the claim each side holds, to commit
	zero := int32(0)
	for i, step := range []struct {
		max     int32
		lease   time.Duration
		commit  bool
		publish int
		want    string // the claim made
	}{
		{max: 2, lease: 30 * time.Second, want: "[0, 1]"},
		{max: 2, lease: 30 * time.Second, want: "none"}, // the partition is claimed
		{max: 2, lease: 40 * time.Second, commit: true, want: "[2, 3]"},
		{max: 10, lease: 30 * time.Second, commit: true, want: "[4, 4]"},
		{max: 10, lease: 30 * time.Second, commit: true, want: "none"}, // commits only: nothing more
		{max: 10, lease: time.Minute, publish: 20, want: "[5, 14]"},    // in the first segment
		{max: 3, lease: time.Minute, commit: true, want: "[15, 17]"},   // across the segment boundary
		{max: 100, lease: time.Minute, commit: true, want: "[18, 24]"}, // in the second segment
	} {
		if step.publish > 0 {
			publish(direct, step.publish)
			publish(fn, step.publish)
			publish(gather, step.publish)
		}
		p := ClaimParams{Topic: "t", Group: "g", Partition: &zero, Member: "m", MaxRecords: step.max, Lease: step.lease,
			RequireOwner: true, Commit: step.commit, CommitPartition: 0}
		pd, pf := p, p
		pd.CommitEpoch, pf.CommitEpoch = epochD, epochF
		res, err := direct.s.ClaimDirect(ctx, direct.b.Pool, &pd, "", Held{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Fallback || res.Committed != step.commit {
			t.Fatalf("step %d: the direct statement answered %+v", i, res)
		}
		row, err := fn.s.ClaimRange(ctx, fn.b.Pool, &pf)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := norm(res.Row), norm(row); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d claims:\ndirect statement %s\nclaim_range()    %s", i, show(got), show(want))
		}
		if got := rangeOf(res.Row); got != step.want {
			t.Fatalf("step %d claimed %s, want %s", i, got, step.want)
		}
		// The gathered claim (ClaimGather), with one request, reading the
		// records from the partition's first segment.
		var fetch string
		if err := gather.b.Pool.QueryRow(ctx, `SELECT relname FROM `+pgx.Identifier{gather.b.Schema, "segment"}.Sanitize()+
			` WHERE partition = 0 ORDER BY start_offset LIMIT 1`).Scan(&fetch); err != nil {
			t.Fatal(err)
		}
		gres, err := gather.s.ClaimGather(ctx, gather.b.Pool, "t", 0, fetch, false, Held{}, []ClaimGatherReq{{Group: "g", Member: "m",
			MaxRecords: step.max, Lease: step.lease, Commit: step.commit, CommitEpoch: epochG}}, func(*RecordRow) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if !gres[0].Settled || gres[0].Committed != step.commit {
			t.Fatalf("step %d: the gathered claim answered %+v", i, gres[0])
		}
		if got, want := norm(gres[0].Row), norm(row); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d claims:\ngathered claim %s\nclaim_range()   %s", i, show(got), show(want))
		}
		if res.Row != nil {
			epochD, epochF, epochG = res.Row.ClaimEpoch, row.ClaimEpoch, gres[0].Row.ClaimEpoch
			if d, f := time.Until(res.Row.ClaimExpiresAt), time.Until(row.ClaimExpiresAt); d > step.lease || f > step.lease {
				t.Fatalf("step %d: expiries %v and %v from now, over the %v lease", i, d, f, step.lease)
			}
		}
		cd, cf, cg := cursor(direct.b), cursor(fn.b), cursor(gather.b)
		if cd != cf || cg != cf {
			t.Fatalf("step %d cursors:\ndirect statement %s\ngathered claim   %s\nclaim_range()    %s", i, cd, cg, cf)
		}
	}
}

// claimShape is a claim made, without its epoch and expiry: what two
// forms of the claim must agree on.
type claimShape struct {
	Partition, TopicID, LogEpoch int32
	First, Last                  int64
	Relname                      string
}

// claimOf is r's claimShape, nil for no claim.
func claimOf(r *ClaimRow) *claimShape {
	if r == nil {
		return nil
	}
	return &claimShape{r.Partition, r.TopicID, r.LogEpoch, r.FirstOffset, r.LastOffset, r.Relname}
}

// rangeOf is the claim's range, "none" for no claim.
func rangeOf(r *ClaimRow) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("[%d, %d]", r.FirstOffset, r.LastOffset)
}
