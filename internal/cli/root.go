// Package cli implements the pgmsg command line. It uses the public pgmsg
// API exactly as an application would.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// globals are the flags every command takes.
type globals struct {
	databaseURL string
	schema      string
	output      string
	stdin       io.Reader
	stdout      io.Writer
	stderr      io.Writer
	// readReplicas are the --read-replica-url flags of the commands that
	// consume (consume, serve): client passes them to the Client.
	readReplicas []string
}

// addReadReplicaFlag adds --read-replica-url to a command whose client
// reads claimed records.
func (g *globals) addReadReplicaFlag(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&g.readReplicas, "read-replica-url", nil,
		"a streaming replica to read claimed records from, when it has replayed them (repeatable; claims and commits stay on --database-url)")
}

// replicaPools opens a pool on each URL (the schema is the primary's). A
// replica that cannot be reached now is kept with a warning: the client
// skips it until it answers.
func (g *globals) replicaPools(ctx context.Context, urls []string) ([]*pgxpool.Pool, error) {
	var pools []*pgxpool.Pool
	for _, u := range urls {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			for _, p := range pools {
				p.Close()
			}
			return nil, fmt.Errorf("invalid --read-replica-url: %w", err)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			for _, p := range pools {
				p.Close()
			}
			return nil, fmt.Errorf("read replica %s: %w", cfg.ConnConfig.Host, err)
		}
		var recovering bool
		if err := pool.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&recovering); err != nil {
			fmt.Fprintf(g.stderr, "pgmsg: warning: read replica %s:%d does not answer (%v); records are read from the primary until it does\n",
				cfg.ConnConfig.Host, cfg.ConnConfig.Port, oneLine(err))
		} else if !recovering {
			fmt.Fprintf(g.stderr, "pgmsg: warning: read replica %s:%d is not a standby; records are read from the primary\n",
				cfg.ConnConfig.Host, cfg.ConnConfig.Port)
		}
		pools = append(pools, pool)
	}
	return pools, nil
}

// Main runs the CLI with args and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "pgmsg: error:", oneLine(err))
		return 1
	}
	return 0
}

func oneLine(err error) string {
	var e *pgmsg.Error
	msg := err.Error()
	if errors.As(err, &e) {
		msg = fmt.Sprintf("%s [%s]", e.Message, e.Code)
	}
	// Some errors (pgx's connection errors) span lines: keep one.
	return strings.Join(strings.Fields(msg), " ")
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "pgmsg",
		Short: "Kafka-style logs and job queues on PostgreSQL",
		Long: `pgmsg gives teams that run PostgreSQL durable, ordered, replayable event
streams with consumer groups, and a job queue, without running a broker.

The database comes from --database-url, else DATABASE_URL, else the standard
PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE, ...).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.databaseURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL, else PG* variables)")
	pf.StringVar(&g.schema, "schema", envOr("PGMSG_SCHEMA", pgmsg.SchemaDefault), "schema pgmsg lives in ($PGMSG_SCHEMA)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table, wide (queue list and config: every setting) or json")
	// Every top-level command, by the group its help lists it under.
	for _, grp := range []struct {
		id, title string
		cmds      []func(*globals) *cobra.Command
	}{
		{"start", "Getting started:", []func(*globals) *cobra.Command{newDev, newServe, newMigrate}},
		{"log", "Logs (topics, records, consumer groups):", []func(*globals) *cobra.Command{newTopic, newPublish, newConsume, newGroup}},
		{"queue", "Job queues:", []func(*globals) *cobra.Command{newQueue}},
		{"ops", "Operations:", []func(*globals) *cobra.Command{newMaintenance, newToken, newBench, newMirror, newVersion}},
	} {
		root.AddGroup(&cobra.Group{ID: grp.id, Title: grp.title})
		for _, newCmd := range grp.cmds {
			cmd := newCmd(g)
			cmd.GroupID = grp.id
			root.AddCommand(cmd)
		}
	}
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command that only groups others
// (pgmsg topic, pgmsg queue periodic, ...) fail on an argument that names
// none of them, with a suggestion, instead of printing its help and
// exiting 0. Without arguments it prints its help.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		refuseUnknownSubcommands(c)
	}
	if !cmd.HasSubCommands() || cmd.Run != nil || cmd.RunE != nil {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", s[0])
		}
		return fmt.Errorf("%s (run '%s --help' for its commands)", msg, cmd.CommandPath())
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// resolveURL returns the database URL: flag, DATABASE_URL, or "" (PG* variables).
func (g *globals) resolveURL() string {
	if g.databaseURL != "" {
		return g.databaseURL
	}
	return os.Getenv("DATABASE_URL")
}

// pool connects to the database.
func (g *globals) pool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(g.resolveURL())
	if err != nil {
		return nil, fmt.Errorf("invalid database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, g.connectError(cfg, err)
	}
	return pool, nil
}

// connectError says in one line where pgmsg tried to connect, why it
// failed (the cause once, although pgx reports each attempt: TLS then
// plain, every address of the host) and what to do.
func (g *globals) connectError(cfg *pgxpool.Config, err error) error {
	cc := cfg.ConnConfig
	where := fmt.Sprintf("%s:%d", cc.Host, cc.Port)
	if strings.HasPrefix(cc.Host, "/") {
		where = "socket " + cc.Host
	}
	cause := oneLine(err)
	hint := ""
	var pgErr *pgconn.PgError
	var opErr *net.OpError
	switch {
	case errors.As(err, &pgErr):
		cause = fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
		switch pgErr.Code {
		case "28P01", "28000":
			hint = "check the user and password in the URL"
		case "3D000":
			hint = "create the database, or name another one in the URL"
		}
	case errors.As(err, &opErr):
		cause = opErr.Err.Error()
		hint = "is PostgreSQL running there? `pgmsg dev` starts one and prints its URL"
	}
	if g.resolveURL() == "" && os.Getenv("PGHOST") == "" {
		hint = strings.TrimPrefix(hint+"; ", "; ") + "no --database-url or DATABASE_URL is set, so the PG* defaults were used"
	}
	msg := fmt.Sprintf("cannot connect to PostgreSQL at %s (user %s, database %s): %s", where, cc.User, cc.Database, cause)
	if hint != "" {
		msg += " (" + hint + ")"
	}
	return errors.New(msg)
}

// client connects and checks the schema is migrated.
func (g *globals) client(ctx context.Context) (*pgmsg.Client, func(), error) {
	pool, err := g.pool(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: g.schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	if err := m.RequireCurrent(ctx); err != nil {
		pool.Close()
		return nil, nil, err
	}
	replicas, err := g.replicaPools(ctx, g.readReplicas)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	closeAll := func() {
		for _, p := range replicas {
			p.Close()
		}
		pool.Close()
	}
	c, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: g.schema, ReadReplicas: replicas})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return c, func() { c.Close(); closeAll() }, nil
}

// printJSON writes v as indented JSON.
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (g *globals) jsonOutput() (bool, error) {
	switch g.output {
	case "json":
		return true, nil
	case "table", "wide", "":
		return false, nil
	}
	return false, fmt.Errorf("invalid --output %q: use table, wide or json", g.output)
}
