package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

func TestMain(m *testing.M) { pgtest.Main(pgmsgtest.WithMain(m)) }

// LeastPrivilegeSQL creates the application role of docs/reliability.md:
// it may call the SQL API and read and write pgmsg's tables, and nothing
// else (no DDL, no other schema). %[1]s is the schema, %[2]s the role.
const LeastPrivilegeSQL = `
CREATE ROLE %[2]s NOLOGIN;
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %[1]s TO %[2]s;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %[1]s TO %[2]s;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %[1]s TO %[2]s;
`

// TestLeastPrivilegeRole runs the log and the queue as a role that has
// only the grants of LeastPrivilegeSQL: an application should not need to
// own pgmsg's schema. Publishing creates segments ahead of need (CREATE
// TABLE + ATTACH PARTITION in _segment_create), which such a role may not
// do unless the segment functions run with their owner's rights (SECURITY
// DEFINER). Fails until they do.
func TestLeastPrivilegeRole(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	requireServerBinaries(t)
	b := pgtest.Schema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	role := "pgmsg_app_" + hex.EncodeToString(rnd[:])
	schema := pgx.Identifier{b.Schema}.Sanitize()
	if _, err := b.Pool.Exec(ctx, fmt.Sprintf(LeastPrivilegeSQL, schema, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = b.Pool.Exec(ctx, fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %s`, role, role))
	})
	owner, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 1, SegmentRecords: 16}); err != nil {
		t.Fatal(err)
	}

	cfg, err := pgxpool.ParseConfig(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+role)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	app, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: b.Schema, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()

	// The role cannot do DDL of its own.
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.x (i int)`); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the application role can create tables: %v", err)
	}
	// 40 records: segments beyond [0, 16) must be created by these publishes.
	for i := range 40 {
		if err := app.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte{byte(i)}}}, nil); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				t.Fatalf("publish %d as %s: %v (in: %s)", i, role, err, pe.Where)
			}
			t.Fatalf("publish %d as %s: %v", i, role, err)
		}
	}
	cl, err := app.Claim(ctx, "t", "g", &pgmsg.ClaimOpts{MaxRecords: 100})
	if err != nil || cl == nil || len(cl.Records) != 40 {
		t.Fatalf("claim as %s: %v %v", role, cl, err)
	}
	if err := app.Commit(ctx, cl); err != nil {
		t.Fatalf("commit as %s: %v", role, err)
	}
	// Offsets 40-44 lie in one segment, created by the publishes above
	// after the grants: the claim reads it directly, so the segment must
	// carry the record table's SELECT grant.
	for i := range 5 {
		if err := app.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte{byte(40 + i)}}}, nil); err != nil {
			t.Fatalf("publish %d as %s: %v", 40+i, role, err)
		}
	}
	var segGranted bool
	if err := b.Pool.QueryRow(ctx, `SELECT has_table_privilege($1, $2, 'SELECT')`, role, schema+".record_1_p0_32").Scan(&segGranted); err != nil || !segGranted {
		t.Fatalf("segment record_1_p0_32 not readable by %s: %v %v", role, segGranted, err)
	}
	cl, err = app.Claim(ctx, "t", "g", &pgmsg.ClaimOpts{MaxRecords: 100})
	if err != nil || cl == nil || len(cl.Records) != 5 || cl.Records[0].Offset != 40 {
		t.Fatalf("second claim as %s: %v %v", role, cl, err)
	}
	if err := app.Commit(ctx, cl); err != nil {
		t.Fatalf("commit as %s: %v", role, err)
	}
	// A segment the role may not read (granted table by table): the claim
	// names no segment and the records come through the record table.
	if _, err := b.Pool.Exec(ctx, fmt.Sprintf(`REVOKE SELECT ON %s.record_1_p0_32 FROM %s`, schema, role)); err != nil {
		t.Fatal(err)
	}
	if err := app.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte{45}}}, nil); err != nil {
		t.Fatalf("publish 45 as %s: %v", role, err)
	}
	cl, err = app.Claim(ctx, "t", "g", &pgmsg.ClaimOpts{MaxRecords: 100})
	if err != nil || cl == nil || len(cl.Records) != 1 || cl.Records[0].Offset != 45 {
		t.Fatalf("claim of an unreadable segment as %s: %v %v", role, cl, err)
	}
	if err := app.Commit(ctx, cl); err != nil {
		t.Fatalf("commit as %s: %v", role, err)
	}
	if _, err := app.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte(`{}`)}, nil); err != nil {
		t.Fatalf("enqueue as %s: %v", role, err)
	}
	jobs, err := app.ClaimJobs(ctx, "q", nil)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim job as %s: %v %v", role, jobs, err)
	}
	if err := app.Complete(ctx, jobs[0]); err != nil {
		t.Fatalf("complete as %s: %v", role, err)
	}
}
