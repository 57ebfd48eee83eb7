package store

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// The worker's completion has two forms: the static statement
// JobCompleteMany (no results, no logs) and job_complete_many(), the SQL
// API's reference. Two jobs alike in everything, completed one each way,
// must be archived alike: every column of the archive row but the id and
// the times (a column the statement forgets, as it once forgot tags and
// metadata, fails here).
func TestJobCompleteManyParity(t *testing.T) {
	ctx := context.Background()
	b := pgtest.Schema(t, nil)
	s := New(b.Schema)
	sch := pgx.Identifier{b.Schema}.Sanitize()
	if _, err := b.Pool.Exec(ctx, `SELECT `+sch+`.queue_create('q')`); err != nil {
		t.Fatal(err)
	}
	// Tags, metadata, a kind, a priority, attempts, a timeout.
	for range 2 {
		if _, err := b.Pool.Exec(ctx, `SELECT `+sch+`.enqueue('q', '\x01'::bytea, p_kind => 'k', p_priority => 3,
			p_max_attempts => 4, p_timeout => interval '9 seconds', p_tags => '["a","b"]'::jsonb,
			p_metadata => '{"m":1}'::jsonb)`); err != nil {
			t.Fatal(err)
		}
	}
	var ids, tokens []int64
	rows, err := b.Pool.Query(ctx, `SELECT id, lease_token FROM `+sch+`.job_claim('q', 2) ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, tok int64
		if err := rows.Scan(&id, &tok); err != nil {
			t.Fatal(err)
		}
		ids, tokens = append(ids, id), append(tokens, tok)
	}
	if err := rows.Err(); err != nil || len(ids) != 2 {
		t.Fatalf("claimed %v: %v", ids, err)
	}
	// Progress on both, so that the column is compared with a value.
	for i := range ids {
		if _, err := b.Pool.Exec(ctx, `SELECT `+sch+`.job_progress($1, $2, '{"p":2}'::jsonb)`, ids[i], tokens[i]); err != nil {
			t.Fatal(err)
		}
	}
	done, err := s.JobCompleteMany(ctx, b.Pool, ids[:1], tokens[:1], nil, nil)
	if err != nil || len(done) != 1 {
		t.Fatalf("JobCompleteMany: %v %v", done, err)
	}
	var n int
	if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+sch+`.job_complete_many(ARRAY[$1::bigint], ARRAY[$2::bigint])`,
		ids[1], tokens[1]).Scan(&n); err != nil || n != 1 {
		t.Fatalf("job_complete_many: %d %v", n, err)
	}
	var a, c string
	row := func(id int64) string {
		var out string
		if err := b.Pool.QueryRow(ctx, `SELECT (to_jsonb(a) - 'id' - 'enqueued_at' - 'attempted_at' - 'finished_at')::text
			FROM `+sch+`.job_archive a WHERE a.id = $1`, id).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, c = row(ids[0]), row(ids[1])
	if a != c {
		t.Fatalf("archived differently:\nJobCompleteMany    %s\njob_complete_many() %s", a, c)
	}
	t.Logf("archived alike: %s", a)
}
