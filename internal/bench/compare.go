package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
)

// Session is what a `bench` invocation runs on and how it reports.
type Session struct {
	// URL of the database; empty starts a throwaway PostgreSQL from the
	// machine's binaries with PGSettings.
	URL        string
	PGSettings map[string]string
	// Schema, Force, Progress and ProgressTTY: see Env.
	Schema      string
	Force       bool
	Progress    io.Writer
	ProgressTTY bool
	// Rounds runs the implementations this many times, alternating.
	Rounds int
	// CPUProfile, when set, is where the Go CPU profile of the runs goes.
	CPUProfile string
	// HoldSnapshot keeps a REPEATABLE READ transaction open in the database
	// for the whole of each run, as an analytics query, a pg_dump or a
	// replica with hot_standby_feedback would: vacuum cannot remove row
	// versions that die during the run.
	HoldSnapshot bool
}

// RunFunc runs one implementation once.
type RunFunc func(ctx context.Context, env *Env, impl string) (any, error)

// Compare runs impls[0] and then each baseline in impls[1:] on the same
// database, Rounds times, and returns the summary (see Summarize).
func Compare(ctx context.Context, s Session, impls []string, run RunFunc) (map[string]any, error) {
	url := s.URL
	if url == "" {
		if s.Progress != nil {
			fmt.Fprintln(s.Progress, "bench: no database URL: starting a throwaway PostgreSQL ...")
		}
		cl, err := pgcluster.Start(ctx, pgcluster.Options{Settings: s.PGSettings})
		if err != nil {
			if errors.Is(err, pgcluster.ErrNoBinaries) {
				return nil, fmt.Errorf("no database URL and no local PostgreSQL to start: %w", err)
			}
			return nil, err
		}
		defer func() { _ = cl.Stop() }()
		url = cl.URL
		if s.Progress != nil {
			fmt.Fprintln(s.Progress, "bench:", cl.Describe())
		}
	} else if len(s.PGSettings) > 0 {
		return nil, fmt.Errorf("bench: server settings only apply to the throwaway PostgreSQL (no database URL given)")
	}
	info, err := Describe(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to PostgreSQL: %w", err)
	}
	if s.CPUProfile != "" {
		f, err := os.Create(s.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	env := &Env{URL: url, Schema: s.Schema, Force: s.Force, Progress: s.Progress, ProgressTTY: s.ProgressTTY}
	runs := make([][]any, len(impls))
	for round := 0; round < max(s.Rounds, 1); round++ {
		for i, impl := range impls {
			Checkpoint(ctx, url)
			release := func() {}
			if s.HoldSnapshot {
				if release, err = HoldSnapshot(ctx, url); err != nil {
					return nil, err
				}
			}
			r, err := run(ctx, env, impl)
			release()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", impl, err)
			}
			runs[i] = append(runs[i], r)
		}
	}
	sum := Summarize(info, runs)
	if s.HoldSnapshot {
		sum["hold_snapshot"] = true
	}
	return sum, nil
}

// HoldSnapshot opens a REPEATABLE READ transaction on its own connection
// and takes its snapshot; release ends it. While it is open, no row version
// that dies after the snapshot can be vacuumed, in any table.
func HoldSnapshot(ctx context.Context, url string) (release func(), err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("bench: hold snapshot: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		// The snapshot is taken by the first statement.
		_, err = tx.Exec(ctx, "SELECT count(*) FROM pg_class")
	}
	if err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("bench: hold snapshot: %w", err)
	}
	return func() {
		c := context.WithoutCancel(ctx)
		_ = tx.Rollback(c)
		_ = conn.Close(c)
	}, nil
}
