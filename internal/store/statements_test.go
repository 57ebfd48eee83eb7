package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/migration"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The lease token's draw has two forms: statements/lease_token.sql (run by
// _lease_token() and _claim_token()) and leaseTokenOf (the Go client's
// direct claims). Given the same UUID, they must give the same token.
func TestLeaseTokenParity(t *testing.T) {
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
	ctx := context.Background()
	q := `SELECT ` + stmt("lease_token", "u.h") + ` FROM (SELECT $1::text AS h) u`
	inputs := [][16]byte{{}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	for range 500 {
		var u [16]byte
		_, _ = rand.Read(u[:])
		u[6] = u[6]&0x0f | 0x40 // version 4, as gen_random_uuid() sets it
		u[8] = u[8]&0x3f | 0x80 // variant
		inputs = append(inputs, u)
	}
	for _, u := range inputs {
		var got int64
		if err := b.Pool.QueryRow(ctx, q, hex.EncodeToString(u[:])).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := leaseTokenOf(u); got != want {
			t.Fatalf("uuid %x: SQL draws %d, Go %d", u, got, want)
		}
		if got < 1 || got > 1<<53-1 {
			t.Fatalf("uuid %x: token %d outside [1, 2^53-1]", u, got)
		}
	}
	// The functions that draw, and the Go draw: in [1, 2^53-1].
	fq := pgx.Identifier{b.Schema}.Sanitize()
	for range 50 {
		var lt, ct int64
		if err := b.Pool.QueryRow(ctx, `SELECT `+fq+`._lease_token(), `+fq+`._claim_token(1)`).Scan(&lt, &ct); err != nil {
			t.Fatal(err)
		}
		if lt < 1 || lt > 1<<53-1 || ct < 1 || ct > 1<<53-1 {
			t.Fatalf("_lease_token() %d, _claim_token(1) %d: outside [1, 2^53-1]", lt, ct)
		}
	}
	for range 50 {
		if tok := leaseToken(); tok < 1 || tok > 1<<53-1 {
			t.Fatalf("leaseToken() %d outside [1, 2^53-1]", tok)
		}
	}
}

// The claim epoch rule (claim_epoch.sql) as the Go statements and
// _claim_token() apply it: the drawn token, or the next one when it
// equals the epoch it replaces; 2^53-1 is followed by 1.
func TestClaimEpochRule(t *testing.T) {
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
	q := `SELECT ` + stmt("claim_epoch", "$1::bigint", "$2::bigint")
	for _, c := range []struct{ token, prev, want int64 }{
		{5, 7, 5}, {7, 7, 8}, {1<<53 - 1, 1<<53 - 1, 1}, {1, 1<<53 - 1, 1},
	} {
		var got int64
		if err := b.Pool.QueryRow(context.Background(), q, c.token, c.prev).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("claim_epoch(%d, %d) = %d, want %d", c.token, c.prev, got, c.want)
		}
	}
}

// Where a statement file is both a Go direct statement's and a function's,
// the function in the database holds the very text (spliced when the
// migrator applied the function files): both forms run one statement.
func TestFunctionsRunTheStatementFiles(t *testing.T) {
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
	squash := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	records := func(topicID, base, now string) []string {
		return []string{topicID, "p_partition", base, now, "p_values", "p_keys", "p_headers", "p_timestamps"}
	}
	for _, c := range []struct {
		function, statement string
		args                []string
	}{
		{"_publish_copy_begin", "publish_copy_reserve", nil},
		{"_publish_direct", "timeline", nil},
		{"_timeline", "timeline", nil},
		{"_claim_token", "lease_token", []string{"h"}},
		{"_claim_token", "claim_epoch", []string{"v", "p_prev"}},
		{"_lease_token", "lease_token", []string{"u.h"}},
		{"_publish_direct", "publish_records", records("r.topic_id", "r.base", "statement_timestamp()")},
		{"_append", "publish_records", records("t.topic_id", "base", "p_now")},
		{"_job_claim", "token_next", []string{"token0 + k.ord - 1"}},
		{"_job_claim", "job_claim_set", []string{"token0", "expires", "now_ts", "p_worker"}},
		{"_publish_direct", "segments_low", []string{"c.next_offset", "c.segment_end", "t.segment_records", "c.topic_id", "c.partition"}},
		{"_publish_copy_end", "segments_low", []string{"c.next_offset", "c.segment_end", "t.segment_records", "c.topic_id", "c.partition"}},
		{"_publish_copy_end", "publish_copy_end", []string{"'pgmsg.copy_offset_seq'", "(SELECT NULL::bigint FROM " +
			pgx.Identifier{b.Schema}.Sanitize() + "._raise('PM004', format('the COPY stored %s records, not the %s reserved', " +
			"currval(current_setting('pgmsg.copy_offset_seq')::oid::regclass) - (c.next_offset - p_count) + 1, p_count)))"}},
		{"_append", "segments_low", []string{"base + n", "seg_end", "t.segment_records", "t.topic_id", "p_partition"}},
	} {
		var src string
		if err := b.Pool.QueryRow(context.Background(),
			`SELECT p.prosrc FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
			  WHERE n.nspname = $1 AND p.proname = $2`, b.Schema, c.function).Scan(&src); err != nil {
			t.Fatalf("%s: %v", c.function, err)
		}
		text := strings.ReplaceAll(migration.Statement(c.statement, c.args...), "{{schema}}", pgx.Identifier{b.Schema}.Sanitize())
		if !strings.Contains(squash(src), squash(text)) {
			t.Errorf("%s() does not run statements/%s.sql", c.function, c.statement)
		}
	}
}
