package migration_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// sqlFunc is one function of the SQL API and its parameters.
type sqlFunc struct {
	name  string
	types []string
}

// TestHostileSQLArguments calls every public function of the SQL API with
// hostile values in each parameter in turn (the others valid), and checks
// that each call succeeds or fails cleanly: a pgmsg error (class PM) or an
// input error (class 22, a value out of range or not of its type; 54 for a
// value over a PostgreSQL size limit), never a syntax error, an undefined
// object or an internal error (which would mean a value reached SQL text),
// and that no object of the schema disappeared.
func TestHostileSQLArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Hundreds of calls: the setup's 2 minutes ran out once at load 29
	// (a chaos run beside it); only a hang should fail this test.
	c, ctx := b.client, pgtest.Context(t, 10*time.Minute)
	schema := pgx.Identifier{b.Schema}.Sanitize()
	if _, err := c.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 16}); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte("v")}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateGroup(ctx, "t", "g", pgmsg.PositionEarliest); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(ctx, `CREATE TABLE `+schema+`.canary (x int)`); err != nil {
		t.Fatal(err)
	}
	objects := func() int {
		var n int
		if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname NOT LIKE 'record\_%'`,
			b.Schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := objects()

	rows, err := b.Pool.Query(ctx, `
		SELECT p.proname, coalesce(array_agg(format_type(t.oid, NULL) ORDER BY a.ord) FILTER (WHERE a.ord IS NOT NULL), '{}')
		FROM pg_proc p
		LEFT JOIN LATERAL unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(typ, ord) ON true
		LEFT JOIN pg_type t ON t.oid = a.typ
		WHERE p.pronamespace = $1::regnamespace AND p.proname NOT LIKE '\_%' AND p.prokind = 'f'
		GROUP BY p.oid, p.proname ORDER BY p.proname`, b.Schema)
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sqlFunc, error) {
		var f sqlFunc
		return f, r.Scan(&f.name, &f.types)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(funcs) < 20 {
		t.Fatalf("only %d SQL functions found", len(funcs))
	}

	// valid returns a valid value of a parameter type, hostile a list of bad ones.
	valid := func(typ string) any {
		switch typ {
		case "text":
			return "t"
		case "integer", "smallint":
			return int32(0)
		case "bigint":
			return int64(0)
		case "boolean":
			return false
		case "bytea":
			return []byte("v")
		case "jsonb":
			return "{}"
		case "interval":
			return "1 second"
		case "timestamp with time zone":
			return "2026-01-01T00:00:00Z"
		case "text[]":
			return []string{"t"}
		case "bytea[]":
			return [][]byte{[]byte("v")}
		case "jsonb[]":
			return []string{"{}"}
		case "bigint[]":
			return []int64{0}
		case "integer[]":
			return []int32{0}
		case "timestamp with time zone[]":
			return []string{"2026-01-01T00:00:00Z"}
		}
		return nil
	}
	bad := func(typ string) []any {
		var out []any
		switch typ {
		case "text", "jsonb", "interval", "timestamp with time zone":
			for _, s := range pgtest.Hostile {
				out = append(out, s)
			}
			if typ == "jsonb" {
				out = append(out, `{"segment_records":"'; DROP TABLE canary; --"}`, `{"max_record_bytes":1e309}`,
					`{"a":"`+strings.Repeat("\\u0000", 10)+`"}`, `[]`, `"x"`, `{"partitions":-1}`)
			}
			if typ == "interval" {
				out = append(out, "-1 second", "0", "178000000 years", "1 microsecond", "P1000000Y")
			}
		case "integer", "smallint":
			out = []any{int32(-1), int32(math.MaxInt32), int32(math.MinInt32), int32(1025)}
		case "bigint":
			out = []any{int64(-1), int64(math.MaxInt64), int64(math.MinInt64)}
		case "bytea":
			out = []any{[]byte{}, []byte("'; DROP TABLE canary; --"), bytes.Repeat([]byte{0xff}, 1<<20+1)}
		case "text[]":
			out = []any{[]string{}, pgtest.Hostile}
		case "bytea[]":
			out = []any{[][]byte{}, [][]byte{nil}, [][]byte{[]byte("'"), []byte(`"`)}}
		case "jsonb[]":
			out = []any{[]string{}, []string{`{"'":"\""}`, `null`, `[]`, `1`}}
		case "bigint[]":
			out = []any{[]int64{}, []int64{-1, math.MaxInt64}}
		case "integer[]":
			out = []any{[]int32{}, []int32{-1, math.MaxInt32}}
		case "timestamp with time zone[]":
			out = []any{[]string{}, []string{"infinity", "-infinity"}}
		}
		return append(out, nil)
	}

	var calls, okCalls int
	classes := map[string]int{}
	// An error raised inside a pgmsg function must be pgmsg's own (class
	// PM): the API promises stable PM codes for bad input. (Class 22 errors
	// from casting a hostile argument happen before the call and are fine.)
	inside := map[string]bool{}
	for _, fn := range funcs {
		for i, typ := range fn.types {
			for _, v := range bad(typ) {
				args := make([]any, len(fn.types))
				ph := make([]string, len(fn.types))
				for j, tj := range fn.types {
					args[j] = valid(tj)
					ph[j] = fmt.Sprintf("$%d::%s", j+1, tj)
				}
				args[i] = v
				q := fmt.Sprintf(`SELECT * FROM %s.%s(%s)`, schema, pgx.Identifier{fn.name}.Sanitize(), strings.Join(ph, ", "))
				calls++
				err := func() error {
					tx, err := b.Pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(ctx)
					if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '10s'`); err != nil {
						return err
					}
					rows, err := tx.Query(ctx, q, args...)
					if err != nil {
						return err
					}
					rows.Close()
					return rows.Err()
				}()
				if err == nil {
					okCalls++
					continue
				}
				var pe *pgconn.PgError
				if !errors.As(err, &pe) {
					// Encoding a value for the wire (a string with a NUL,
					// invalid UTF-8) fails in the driver: not an SQL error.
					classes["client"]++
					continue
				}
				cls := pe.Code[:2]
				classes[pe.Code]++
				if cls != "PM" && strings.Contains(pe.Where, "function") {
					inside[fmt.Sprintf("%s: %s %s", fn.name, pe.Code, pe.Message)] = true
				}
				switch cls {
				case "PM", "22", "54":
				default:
					t.Errorf("%s(%s) with %s = %.80q: SQLSTATE %s %s", fn.name, strings.Join(fn.types, ", "), typ, fmt.Sprint(v), pe.Code, pe.Message)
				}
			}
		}
	}
	if after := objects(); after != before {
		t.Errorf("schema objects: %d before, %d after", before, after)
	}
	t.Logf("%d functions, %d calls: %d succeeded, failures by SQLSTATE %v", len(funcs), calls, okCalls, classes)
	for k := range inside {
		t.Errorf("raised inside a function without a pgmsg code: %.200s", k)
	}
}
