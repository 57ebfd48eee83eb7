// Command peers runs the queue benchmark of `pgmsg bench queue` with River
// (github.com/riverqueue/river v0.51.2) added as an implementation, so that
// River goes through the same runner as pgmsg and the seed baseline's SQL: same
// payload, worker count, prefill, database, measurements and JSON keys. It
// is its own module so that River never enters pgmsg's go.mod.
//
//	cd bench/peers && go run . --impl pgmsg --baseline river,seed --workers 16 --json
//
// Without --database-url or DATABASE_URL it starts a throwaway PostgreSQL,
// like `pgmsg bench`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pgmsg/pgmsg/internal/bench"
)

func main() {
	bench.RegisterQueue(bench.ImplRiver, newRiverQueue)
	var (
		o        bench.QueueOptions
		url      = flag.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL; empty: a throwaway PostgreSQL)")
		schema   = flag.String("schema", "pgmsg_bench", "schema for pgmsg (created and dropped when it does not exist)")
		impl     = flag.String("impl", bench.ImplRiver, "what to measure: river, pgmsg or seed")
		baseline = flag.String("baseline", "", "comma-separated implementations to run side by side after --impl")
		rounds   = flag.Int("rounds", 1, "alternating rounds; each figure is the median")
		asJSON   = flag.Bool("json", false, "print the JSON summary")
		force    = flag.Bool("force", false, "run even if the schema holds other pgmsg data")
		strict   = flag.Bool("strict", false, "exit with an error when a run had errors or measured nothing")
	)
	flag.DurationVar(&o.Duration, "duration", 10*time.Second, "measured duration")
	flag.DurationVar(&o.Warmup, "warmup", time.Second, "load before measuring")
	flag.IntVar(&o.Payload, "payload", 1024, "payload bytes per job")
	flag.IntVar(&o.Workers, "workers", 16, "concurrent workers")
	flag.IntVar(&o.Jobs, "jobs", 100000, "jobs enqueued before the run")
	flag.Float64Var(&o.Rate, "rate", 0, "jobs per second enqueued during the run")
	flag.Parse()

	impls := []string{*impl}
	if *baseline != "" {
		impls = append(impls, strings.Split(*baseline, ",")...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	summary, err := bench.Compare(ctx, bench.Session{URL: *url, Schema: *schema, Force: *force, Progress: os.Stderr, Rounds: *rounds},
		impls, func(ctx context.Context, env *bench.Env, impl string) (any, error) {
			return bench.RunQueue(ctx, env, impl, o)
		})
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(summary)
	} else {
		bench.PrintSummary(os.Stdout, summary)
	}
	if *strict {
		if err := bench.Check(summary); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
	}
}
