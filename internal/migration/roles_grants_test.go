package migration_test

import (
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// splitPrivileges splits a GRANT privilege list ("SELECT, UPDATE (a, b)")
// into one entry per privilege and column: "SELECT", "UPDATE(a)", "UPDATE(b)".
func splitPrivileges(list string) []string {
	var out []string
	depth, start := 0, 0
	emit := func(p string) {
		p = strings.TrimSpace(p)
		name, cols, ok := strings.Cut(p, "(")
		if !ok {
			out = append(out, p)
			return
		}
		for _, c := range strings.Split(strings.TrimSuffix(cols, ")"), ",") {
			out = append(out, strings.TrimSpace(name)+"("+strings.TrimSpace(c)+")")
		}
	}
	for i, r := range list {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				emit(list[start:i])
				start = i + 1
			}
		}
	}
	emit(list[start:])
	return out
}

// The database's grants to the schema's roles are exactly the rows of
// role_privileges(), the one table of what each role may do:
// every ACL entry of the schema, its tables (segments included), their
// columns, its sequences and its functions, read from the catalog; and
// what the roles may effectively do (has_table_privilege,
// has_function_privilege, PUBLIC's grants included) agrees.
func TestRolesGrantsMatchTable(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.ctx
	_, err := tb.client.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 64})
	require.NoError(t, err)
	// A COPY publish as the owner creates a partition's offset sequence.
	recs := make([]*pgmsg.Record, 40)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "t", Partition: 0, Value: []byte("v")}
	}
	require.NoError(t, tb.client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	// The publish asks for partition 0's two segments of headroom after its
	// commit; wait for them, so that no segment appears while the grants
	// are read. Partition 1, never published to, keeps its one segment.
	sch := pgx.Identifier{tb.Schema}.Sanitize()
	require.Eventually(t, func() bool {
		var end int64
		_, _ = tb.Pool.Exec(ctx, "SELECT "+sch+".segment_ensure('t', 0)")
		err := tb.Pool.QueryRow(ctx, "SELECT max(end_offset) FROM "+sch+".segment WHERE partition = 0").Scan(&end)
		return err == nil && end == 3*64
	}, 30*time.Second, 50*time.Millisecond)

	roles := []string{"producer", "consumer", "worker", "admin"}
	// Expected: the table, segments expanded from the catalog.
	rows, err := tb.Pool.Query(ctx, "SELECT role, kind, object, privilege FROM "+pgx.Identifier{tb.Schema}.Sanitize()+".role_privileges()")
	require.NoError(t, err)
	type row struct{ Role, Kind, Object, Privilege string }
	table, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.NotEmpty(t, table)
	var segments []string
	rows, err = tb.Pool.Query(ctx, `SELECT c.relname::text FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)) pt
		JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pt.relid
		WHERE pt.isleaf`, pgx.Identifier{tb.Schema, "record"}.Sanitize())
	require.NoError(t, err)
	segments, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, segments, 4, "three segments of the partition published to, one of the other")
	var want []string
	for _, r := range table {
		objects := []string{r.Object}
		kind := r.Kind
		if kind == "segments" {
			kind, objects = "table", segments
		}
		if kind == "function" {
			// The catalog's spelling of the signature.
			var sig string
			require.NoError(t, tb.Pool.QueryRow(ctx, `SELECT pg_catalog.to_regprocedure($1)::oid::pg_catalog.regprocedure::text`,
				pgx.Identifier{tb.Schema}.Sanitize()+"."+r.Object).Scan(&sig), r.Object)
			objects = []string{sig[strings.Index(sig, ".")+1:]}
		}
		for _, o := range objects {
			for _, p := range splitPrivileges(r.Privilege) {
				want = append(want, r.Role+" "+kind+" "+o+" "+p)
			}
		}
	}
	sort.Strings(want)

	// Actual: every ACL entry of the schema's objects naming a role.
	rows, err = tb.Pool.Query(ctx, `
WITH r AS (SELECT x.name, pg_catalog.to_regrole($1 || '_' || x.name) AS oid
             FROM pg_catalog.unnest($2::text[]) AS x(name)),
n AS (SELECT pg_catalog.to_regnamespace(pg_catalog.quote_ident($1))::oid AS oid)
SELECT r.name || ' schema  ' || a.privilege_type
  FROM pg_catalog.pg_namespace ns, n, pg_catalog.aclexplode(ns.nspacl) a JOIN r ON r.oid = a.grantee
 WHERE ns.oid = n.oid
UNION ALL
SELECT r.name || CASE WHEN c.relkind = 'S' THEN ' sequence ' ELSE ' table ' END || c.relname || ' ' || a.privilege_type
  FROM pg_catalog.pg_class c, n, pg_catalog.aclexplode(c.relacl) a JOIN r ON r.oid = a.grantee
 WHERE c.relnamespace = n.oid
UNION ALL
SELECT r.name || ' table ' || c.relname || ' ' || a.privilege_type || '(' || att.attname || ')'
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute att ON att.attrelid = c.oid, n,
       pg_catalog.aclexplode(att.attacl) a JOIN r ON r.oid = a.grantee
 WHERE c.relnamespace = n.oid
UNION ALL
SELECT r.name || ' function ' || pg_catalog.substr(p.oid::pg_catalog.regprocedure::text,
                                                  pg_catalog.strpos(p.oid::pg_catalog.regprocedure::text, '.') + 1)
       || ' ' || a.privilege_type
  FROM pg_catalog.pg_proc p, n, pg_catalog.aclexplode(p.proacl) a JOIN r ON r.oid = a.grantee
 WHERE p.pronamespace = n.oid
ORDER BY 1`, tb.Schema, roles)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	sort.Strings(got)
	require.Equal(t, want, got, "grants in the database vs role_privileges()")

	// Every table of the schema but the topics' tables and their segments
	// has a row: a new table needs a decision of who may touch it.
	rows, err = tb.Pool.Query(ctx, `SELECT c.relname::text FROM pg_catalog.pg_class c
		WHERE c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident($1)) AND c.relkind IN ('r', 'p')
		  AND NOT c.relispartition ORDER BY 1`, tb.Schema)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	listed := map[string]bool{}
	for _, r := range table {
		if r.Kind == "table" {
			listed[r.Object] = true
		}
	}
	for _, name := range tables {
		require.True(t, listed[name], "table %s has no row in role_privileges()", name)
	}

	// Effectively: table privileges (PUBLIC's included) are the table's,
	// and the SECURITY DEFINER functions are executable by the roles the
	// table names only.
	have := map[string]bool{}
	for _, w := range want {
		have[w] = true
	}
	rows, err = tb.Pool.Query(ctx, `SELECT c.relname::text, c.relkind::text FROM pg_catalog.pg_class c
		WHERE c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident($1)) AND c.relkind IN ('r', 'p', 'S')`, tb.Schema)
	require.NoError(t, err)
	type rel struct{ Name, Kind string }
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	require.NoError(t, err)
	for _, role := range roles {
		for _, r := range rels {
			privs, kind := []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"}, "table"
			if r.Kind == "S" {
				privs, kind = []string{"USAGE", "SELECT", "UPDATE"}, "sequence"
			}
			for _, p := range privs {
				var ok bool
				q := `SELECT pg_catalog.has_table_privilege($1, $2::regclass, $3)`
				if kind == "sequence" {
					q = `SELECT pg_catalog.has_sequence_privilege($1, $2::regclass, $3)`
				}
				require.NoError(t, tb.Pool.QueryRow(ctx, q, tb.Schema+"_"+role, pgx.Identifier{tb.Schema, r.Name}.Sanitize(), p).Scan(&ok))
				require.Equal(t, have[role+" "+kind+" "+r.Name+" "+p], ok, "%s %s on %s", role, p, r.Name)
			}
		}
		rows, err = tb.Pool.Query(ctx, `SELECT pg_catalog.substr(p.oid::pg_catalog.regprocedure::text,
				pg_catalog.strpos(p.oid::pg_catalog.regprocedure::text, '.') + 1),
				pg_catalog.has_function_privilege($2, p.oid, 'EXECUTE')
			FROM pg_catalog.pg_proc p WHERE p.pronamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident($1)) AND p.prosecdef`,
			tb.Schema, tb.Schema+"_"+role)
		require.NoError(t, err)
		type fn struct {
			Sig string
			OK  bool
		}
		fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fn])
		require.NoError(t, err)
		require.NotEmpty(t, fns)
		for _, f := range fns {
			require.Equal(t, have[role+" function "+f.Sig+" EXECUTE"], f.OK, "%s EXECUTE on definer %s", role, f.Sig)
		}
	}
}

// docs/operations.md lists role_privileges() as it is, between the
// markers below, grouped by role, kind and privilege in the table's order.
func TestRolesTableDocumented(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	rows, err := tb.Pool.Query(tb.ctx, "SELECT role, kind, object, privilege FROM "+pgx.Identifier{tb.Schema}.Sanitize()+".role_privileges()")
	require.NoError(t, err)
	type row struct{ Role, Kind, Object, Privilege string }
	table, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	type key struct{ Role, Kind, Privilege string }
	var order []key
	objects := map[key][]string{}
	for _, r := range table {
		k := key{r.Role, r.Kind, r.Privilege}
		if _, ok := objects[k]; !ok {
			order = append(order, k)
		}
		o := "`" + r.Object + "`"
		if r.Object == "" {
			o = "–"
		}
		objects[k] = append(objects[k], o)
	}
	var b strings.Builder
	b.WriteString("<!-- role_privileges: TestRolesTableDocumented -->\n")
	b.WriteString("| role | kind | privilege | objects |\n|---|---|---|---|\n")
	for _, k := range order {
		b.WriteString("| `<schema>_" + k.Role + "` | " + k.Kind + " | " + k.Privilege + " | " + strings.Join(objects[k], ", ") + " |\n")
	}
	b.WriteString("<!-- /role_privileges -->\n")
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	const start = "<!-- role_privileges: TestRolesTableDocumented -->\n"
	_, block, ok := strings.Cut(string(doc), start)
	require.True(t, ok, "docs/operations.md lacks the marker %q", start)
	block, _, ok = strings.Cut(block, "<!-- /role_privileges -->\n")
	require.True(t, ok)
	require.Equal(t, b.String(), start+block+"<!-- /role_privileges -->\n", "docs/operations.md must list role_privileges() as it is")
}
