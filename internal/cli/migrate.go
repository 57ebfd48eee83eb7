package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

func newMigrate(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Install, upgrade or remove pgmsg's schema",
		Long: `Migrations are embedded in the binary: versioned migrations for tables and
data, applied once each, and function files, applied again whenever this
binary's differ from the schema's ("fn" rows in "migrate status"). Any number
of processes may run "migrate up" at once: an advisory lock lets one apply
them. "migrate down" reverts versions and drops the functions; "migrate up"
by the binary of the version left restores them.`,
	}
	migrator := func(cmd *cobra.Command) (*pgmsgmigrate.Migrator, func(), error) {
		pool, err := g.pool(cmd.Context())
		if err != nil {
			return nil, nil, err
		}
		m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: g.schema})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return m, pool.Close, nil
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "up",
		Short:   "Apply every pending migration",
		Example: "  pgmsg migrate up --database-url postgres://localhost/app",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, done, err := migrator(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := m.Up(cmd.Context())
			if err != nil {
				return err
			}
			return g.reportVersions("applied", res)
		},
	})
	var steps int
	down := &cobra.Command{
		Use:   "down",
		Short: "Revert migrations (all by default): this drops pgmsg's tables and their data",
		Example: `  pgmsg migrate down --steps 1
  pgmsg migrate down            # removes pgmsg entirely`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if steps < 0 {
				return fmt.Errorf("--steps must not be negative")
			}
			m, done, err := migrator(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := m.Down(cmd.Context(), steps)
			if err != nil {
				return err
			}
			return g.reportVersions("reverted", res)
		},
	}
	down.Flags().IntVar(&steps, "steps", 0, "number of versions to revert (0: all)")
	cmd.AddCommand(down)
	var from int
	sqlCmd := &cobra.Command{
		Use:   "sql",
		Short: "Print the install (or an upgrade) as plain SQL, for psql alone",
		Long: `sql prints every migration after version --from (0: a new install), then
the function files, as one SQL script for --schema, which needs no pgmsg
binary to run:

  psql -v ON_ERROR_STOP=1 -f install.sql

It runs in one transaction under the same lock as "migrate up", refuses a
schema that is not at version --from, and records the versions it applies
and the function files (always included), so the Go migrator and the script
can take turns on one schema.`,
		Example: `  pgmsg migrate sql > install.sql
  pgmsg migrate sql --schema events --from 3 > upgrade.sql`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			script, err := pgmsgmigrate.Script(g.schema, from)
			if err != nil {
				return err
			}
			_, err = io.WriteString(g.stdout, script)
			return err
		},
	}
	sqlCmd.Flags().IntVar(&from, "from", 0, "the version the schema is at (0: a new install)")
	cmd.AddCommand(sqlCmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "List migrations and whether they are applied",
		Long: `List every migration this binary knows, by version, with when it was
applied to --schema (blank: pending). pgmsg migrate up applies the pending
ones; the SQL functions (internal/migration/functions) are re-applied with
them whenever they changed.`,
		Example: "  pgmsg migrate status\n  pgmsg migrate status --schema pgmsg_test -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, done, err := migrator(cmd)
			if err != nil {
				return err
			}
			defer done()
			st, err := m.Status(cmd.Context())
			if err != nil {
				return err
			}
			fns, err := m.Functions(cmd.Context())
			if err != nil {
				return err
			}
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"versions": st, "functions": fns})
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "VERSION\tNAME\tAPPLIED AT")
			for _, v := range st {
				at := "pending"
				if v.AppliedAt != nil {
					at = v.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
				}
				fmt.Fprintf(w, "%03d\t%s\t%s\n", v.Version, v.Name, at)
			}
			for _, f := range fns {
				at := "pending"
				switch {
				case f.AppliedAt != nil && f.Current:
					at = f.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
				case f.AppliedAt != nil:
					at = "changed (run migrate up)"
				}
				fmt.Fprintf(w, "fn\t%s\t%s\n", f.Name, at)
			}
			return w.Flush()
		},
	})
	return cmd
}

func (g *globals) reportVersions(verb string, res *pgmsgmigrate.Result) error {
	js, err := g.jsonOutput()
	if err != nil {
		return err
	}
	if js {
		out := map[string]any{verb: res.Versions, "schema": g.schema}
		if verb == "applied" {
			out["functions"] = res.Functions
		}
		return g.printJSON(out)
	}
	if len(res.Versions) == 0 && len(res.Functions) == 0 {
		fmt.Fprintf(g.stdout, "schema %s: nothing to do\n", g.schema)
		return nil
	}
	var parts []string
	if len(res.Versions) > 0 {
		vs := make([]string, len(res.Versions))
		for i, v := range res.Versions {
			vs[i] = strconv.Itoa(v)
		}
		parts = append(parts, verb+" "+strings.Join(vs, ", "))
	}
	if len(res.Functions) > 0 {
		parts = append(parts, "functions "+strings.Join(res.Functions, ", "))
	}
	fmt.Fprintf(g.stdout, "schema %s: %s\n", g.schema, strings.Join(parts, "; "))
	return nil
}
