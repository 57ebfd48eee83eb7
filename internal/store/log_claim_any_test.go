package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// A member that owns several partitions claims with ClaimAnyDirect, and
// with claim_range() when that falls back (as internal/logread does): on
// two schemas with the same topic, member and records, the claims must
// pick the same partitions and ranges as claim_range() alone, commit the
// same claims, fail alike, and leave every cursor row alike.
func TestClaimAnyParity(t *testing.T) {
	ctx := context.Background()
	type side struct {
		b     *pgtest.Bundle
		s     *Store
		epoch int64 // the claim held, to commit
		part  int32
		prev  map[int32]int64
	}
	open := func() *side {
		b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
		sd := &side{b: b, s: New(b.Schema), prev: map[int32]int64{}}
		if _, err := sd.s.TopicCreate(ctx, b.Pool, "t", 4, []byte(`{"segment_records": 16}`)); err != nil {
			t.Fatal(err)
		}
		// One member: it owns the four partitions.
		if _, err := b.Pool.Exec(ctx, `SELECT * FROM `+pgx.Identifier{b.Schema}.Sanitize()+`.group_heartbeat('t', 'g', 'm')`); err != nil {
			t.Fatal(err)
		}
		return sd
	}
	publish := func(sd *side, partition int32, n int) {
		t.Helper()
		b := NewPublishBatch("t", partition, n)
		for i := range b.Values {
			b.Values[i] = []byte(fmt.Sprint(i))
		}
		if _, err := sd.s.Publish(ctx, sd.b.Pool, &b, false); err != nil {
			t.Fatal(err)
		}
	}
	// cursors are the group's cursor rows without what differs by draw or
	// clock: whether each claim epoch changed since the last look.
	cursors := func(sd *side) string {
		t.Helper()
		rows, err := sd.b.Pool.Query(ctx, `SELECT partition, pg_catalog.concat_ws(' ', next_offset, coalesce(claim_start::text, '-'),
		        coalesce(claim_end::text, '-'), coalesce(owner, '-'), coalesce(claim_owner, '-'),
		        coalesce((claim_expires_at - claimed_at)::text, '-'), claimed_at IS NOT NULL, committed_at IS NOT NULL, committed_at = claimed_at),
		        coalesce(claim_epoch, 0)
		   FROM `+pgx.Identifier{sd.b.Schema, "group_cursor"}.Sanitize()+` WHERE group_name = 'g' ORDER BY partition`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out string
		for rows.Next() {
			var p int32
			var row string
			var epoch int64
			if err := rows.Scan(&p, &row, &epoch); err != nil {
				t.Fatal(err)
			}
			out += fmt.Sprintf("\n  p%d %s epoch new %v", p, row, epoch != sd.prev[p])
			sd.prev[p] = epoch
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	norm := claimOf
	show := func(c *claimShape) string {
		if c == nil {
			return "none"
		}
		return fmt.Sprintf("p%d [%d, %d] segment %q", c.Partition, c.First, c.Last, c.Relname)
	}

	any, fn := open(), open()
	for i, step := range []struct {
		publish    map[int32]int
		max        int32
		commit     bool
		staleEpoch bool   // commit an epoch that is not the claim's
		leave      bool   // the member leaves first
		fallback   bool   // ClaimAnyDirect must leave it to claim_range()
		want       string // the claim made, or the error
	}{
		{publish: map[int32]int{0: 5, 2: 3}, max: 2, want: "p0 [0, 1]"},
		{max: 2, commit: true, want: "p2 [0, 1]"},  // never claimed first
		{max: 2, commit: true, want: "p0 [2, 3]"},  // claimed least recently
		{max: 10, commit: true, want: "p2 [2, 2]"}, // p0 is the committed one
		{max: 10, commit: true, want: "p0 [4, 4]"}, // p2 is empty
		{max: 10, commit: true, want: "none"},      // commits p0 only
		{max: 10, want: "none"},                    // nothing, no commit, a member: nothing
		{publish: map[int32]int{1: 20}, max: 10, want: "p1 [0, 9]"},
		{publish: map[int32]int{3: 3}, max: 10, commit: true, want: "p3 [0, 2]"},
		{max: 10, commit: true, want: "p1 [10, 19]"}, // across the segment boundary
		{publish: map[int32]int{0: 2, 3: 2}, max: 10, commit: true, want: "p0 [5, 6]"},
		{publish: map[int32]int{1: 1}, max: 10, commit: true, want: "p3 [3, 4]"},                   // claimed before p1
		{max: 10, commit: true, staleEpoch: true, fallback: true, want: errs.ClaimNotHeld.Error()}, // not held: claim_range() says why
		{publish: map[int32]int{2: 4}, max: 3, commit: true, want: "p2 [3, 5]"},
		{max: 3, commit: true, want: "p1 [20, 20]"},
		{max: 3, commit: true, want: "p2 [6, 6]"},
		{publish: map[int32]int{2: 2}, max: 3, commit: true, want: "p2 [7, 8]"},              // only the committed one has more
		{max: 3, commit: true, leave: true, fallback: true, want: errs.ClaimNotHeld.Error()}, // its claims ended with it
		{max: 3, fallback: true, want: errs.NotMember.Error()},
	} {
		var got [2]string
		var rows [2]*claimShape
		for j, sd := range []*side{any, fn} {
			for p, n := range step.publish {
				publish(sd, p, n)
			}
			if step.leave {
				if _, err := sd.s.GroupLeave(ctx, sd.b.Pool, "t", "g", "m"); err != nil {
					t.Fatal(err)
				}
			}
			p := ClaimParams{Topic: "t", Group: "g", Member: "m", MaxRecords: step.max, Lease: 30 * time.Second, RequireOwner: true,
				Commit: step.commit, CommitPartition: sd.part, CommitEpoch: sd.epoch}
			if step.staleEpoch {
				p.CommitEpoch++
			}
			var (
				row *ClaimRow
				err error
			)
			if sd == any {
				var res ClaimDirectResult
				res, err = sd.s.ClaimAnyDirect(ctx, sd.b.Pool, &p)
				if err != nil {
					t.Fatal(err)
				}
				if res.Fallback != step.fallback {
					t.Fatalf("step %d: ClaimAnyDirect answered %+v, want fallback %v", i, res, step.fallback)
				}
				if !res.Fallback && res.Committed != step.commit {
					t.Fatalf("step %d: ClaimAnyDirect answered %+v", i, res)
				}
				row = res.Row
				if res.Fallback {
					row, err = sd.s.ClaimRange(ctx, sd.b.Pool, &p)
				}
			} else {
				row, err = sd.s.ClaimRange(ctx, sd.b.Pool, &p)
			}
			rows[j] = norm(row)
			switch {
			case err != nil:
				if !errors.Is(err, errs.ClaimNotHeld) && !errors.Is(err, errs.ClaimExpired) && !errors.Is(err, errs.NotMember) {
					t.Fatalf("step %d: %v", i, err)
				}
				got[j] = errs.Map(err).Error()
				for _, e := range []error{errs.ClaimNotHeld, errs.ClaimExpired, errs.NotMember} {
					if errors.Is(err, e) {
						got[j] = e.Error()
					}
				}
			case row == nil:
				got[j] = "none"
			default:
				got[j] = fmt.Sprintf("p%d [%d, %d]", row.Partition, row.FirstOffset, row.LastOffset)
				sd.part, sd.epoch = row.Partition, row.ClaimEpoch
				if d := time.Until(row.ClaimExpiresAt); d > 30*time.Second || d < 20*time.Second {
					t.Fatalf("step %d: expiry %v from now, lease 30s", i, d)
				}
			}
		}
		if got[0] != step.want || got[1] != step.want {
			t.Fatalf("step %d: ClaimAnyDirect+claim_range() %s, claim_range() %s, want %s", i, got[0], got[1], step.want)
		}
		if !reflect.DeepEqual(rows[0], rows[1]) {
			t.Fatalf("step %d claims:\nClaimAnyDirect %s\nclaim_range()  %s", i, show(rows[0]), show(rows[1]))
		}
		if ca, cf := cursors(any), cursors(fn); ca != cf {
			t.Fatalf("step %d cursors:\nClaimAnyDirect %s\nclaim_range()  %s", i, ca, cf)
		}
	}
}

// A commit riding on ClaimAnyDirect whose cursor row another transaction
// changed after the statement took its snapshot (here a member joining,
// whose rebalance marks the partition for hand-over while its claim is
// live) is not written by the statement, which then still claims another
// partition: the answer must say the commit was not made (the caller
// commits it on its own, internal/logread), never take it as made. The
// interleaving is forced: the join's transaction stays open until the
// claim waits for its row lock.
func TestClaimAnyDirectCommitRace(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 3})
	s := New(b.Schema)
	schema := pgx.Identifier{b.Schema}.Sanitize()
	if _, err := s.TopicCreate(ctx, b.Pool, "t", 4, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	heartbeat := func(exec DBTX, member string) {
		t.Helper()
		if _, err := exec.Exec(ctx, `SELECT * FROM `+schema+`.group_heartbeat('t', 'g', $1)`, member); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(partition int32, n int) {
		t.Helper()
		pb := NewPublishBatch("t", partition, n)
		for i := range pb.Values {
			pb.Values[i] = []byte(fmt.Sprint(i))
		}
		if _, err := s.Publish(ctx, b.Pool, &pb, false); err != nil {
			t.Fatal(err)
		}
	}
	cursor := func(partition int32) string {
		t.Helper()
		var out string
		if err := b.Pool.QueryRow(ctx, `SELECT pg_catalog.concat_ws(' ', next_offset, coalesce(claim_end::text, '-'),
		        coalesce(owner, '-'), coalesce(next_owner, '-'))
		   FROM `+schema+`.group_cursor WHERE group_name = 'g' AND partition = $1`, partition).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	params := func() *ClaimParams {
		return &ClaimParams{Topic: "t", Group: "g", Member: "m", MaxRecords: 10, Lease: 30 * time.Second, RequireOwner: true, Async: true}
	}

	// m owns the four partitions and holds a claim of p3's records.
	heartbeat(b.Pool, "m")
	publish(3, 2)
	res, err := s.ClaimAnyDirect(ctx, b.Pool, params())
	if err != nil || res.Row == nil || res.Row.Partition != 3 {
		t.Fatalf("first claim: %+v %v", res, err)
	}
	held := res.Row
	publish(0, 2)

	// m2 joins in a transaction left open: the rebalance locks p2's and
	// p3's cursor rows (p3: next owner m2, once m's claim ends).
	tx, err := b.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var joiner int32
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.pg_backend_pid()`).Scan(&joiner); err != nil {
		t.Fatal(err)
	}
	heartbeat(tx, "m2")

	// m commits its claim of p3 with its next claim, which finds p0.
	type answer struct {
		res ClaimDirectResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		p := params()
		p.Commit, p.CommitPartition, p.CommitEpoch = true, held.Partition, held.ClaimEpoch
		res, err := s.ClaimAnyDirect(ctx, b.Pool, p)
		done <- answer{res, err}
	}()
	waitBlocked(ctx, t, b.Pool, joiner, func() {
		select {
		case a := <-done:
			t.Fatalf("the claim did not wait for the join's row lock: %+v %v", a.res, a.err)
		default:
		}
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.res.Fallback || a.res.Row == nil || a.res.Row.Partition != 0 || a.res.Row.FirstOffset != 0 || a.res.Row.LastOffset != 1 {
		t.Fatalf("claim with the commit: %+v, want p0 [0, 1]", a.res)
	}
	if a.res.Committed {
		t.Fatalf("the answer says the commit was made; p3's cursor: %s", cursor(3))
	}
	// Nothing was written for p3: the claim is still m's, and held.
	if got := cursor(3); got != "0 1 m m2" {
		t.Fatalf("p3's cursor %q, want the claim still held (0 1 m m2)", got)
	}
	if err := s.Commit(ctx, b.Pool, "t", "g", held.Partition, held.ClaimEpoch, nil); err != nil {
		t.Fatalf("the claim is still held, its commit must succeed: %v", err)
	}
}

// waitBlocked returns once a backend waits for a lock that the backend
// blocker holds, calling check (which fails the test when what should
// wait has returned instead) before each look.
func waitBlocked(ctx context.Context, t *testing.T, exec DBTX, blocker int32, check func()) {
	t.Helper()
	for {
		check()
		var waiting bool
		if err := exec.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
		                               WHERE $1::integer = ANY (pg_catalog.pg_blocking_pids(a.pid)))`, blocker).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
