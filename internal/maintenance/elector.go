package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/store"
)

// LeadConfig is what Elector.Run needs. Every field is required: the
// caller fills in the defaults.
type LeadConfig struct {
	// ConnConfig opens the dedicated connection that holds the leader's
	// advisory lock (a copy is used for each attempt).
	ConnConfig *pgx.ConnConfig
	// Store runs the lock statement (store.MaintenanceLeaderTryLock).
	Store *store.Store
	// Schema is named in the log line of a new leader.
	Schema string
	Logger *slog.Logger
	// Interval is the time between maintenance runs of the leader, and
	// between leadership attempts of a non-leader.
	Interval time.Duration
	// Maintain is one maintenance run; its error is logged.
	Maintain func(ctx context.Context) error
	// PeriodicEvery is the time between the leader's calls of Periodic.
	PeriodicEvery time.Duration
	// Periodic enqueues due periodic jobs; its error is logged. Their
	// ticks are seconds apart, maintenance runs Interval apart: the
	// leader calls it on a loop of its own while it leads.
	Periodic func(ctx context.Context) error
}

// Elector takes part in the election of a schema's maintenance leader and
// knows whether this process leads. The zero value is ready to use; an
// Elector must not be copied.
type Elector struct {
	leading atomic.Bool
}

// IsLeader reports whether Run currently leads maintenance.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Run takes part in the election until ctx ends, and returns ctx's error.
// One process per schema is leader: it holds a session advisory lock on a
// dedicated connection and runs cfg.Maintain every cfg.Interval. When the
// leader dies its connection closes, the lock is released, and another
// process's Run takes over within one Interval.
func (e *Elector) Run(ctx context.Context, cfg *LeadConfig) error {
	for {
		err := e.lead(ctx, cfg)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			cfg.Logger.Warn("pgmsg: maintenance leadership lost or not available", "error", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cfg.Interval):
		}
	}
}

// lead tries to become leader; as leader it runs maintenance until ctx
// ends or the lock connection fails.
func (e *Elector) lead(ctx context.Context, cfg *LeadConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	leader, err := cfg.Store.MaintenanceLeaderTryLock(ctx, conn)
	if err != nil {
		return err
	}
	if !leader {
		return nil
	}
	e.leading.Store(true)
	defer e.leading.Store(false)
	cfg.Logger.Info("pgmsg: this process is the maintenance leader", "schema", cfg.Schema)
	pctx, stopPeriodic := context.WithCancel(ctx)
	periodicDone := make(chan struct{})
	go func() {
		defer close(periodicDone)
		runPeriodic(pctx, cfg)
	}()
	defer func() {
		stopPeriodic()
		<-periodicDone
	}()
	for {
		if err := cfg.Maintain(ctx); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("pgmsg: maintenance run failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.Interval):
		}
		// Still holding the lock? (The connection may have been cut.)
		if err := conn.Ping(ctx); err != nil {
			return fmt.Errorf("maintenance lock connection: %w", err)
		}
	}
}

// runPeriodic calls cfg.Periodic every cfg.PeriodicEvery until ctx ends.
func runPeriodic(ctx context.Context, cfg *LeadConfig) {
	t := time.NewTicker(cfg.PeriodicEvery)
	defer t.Stop()
	for {
		if err := cfg.Periodic(ctx); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("pgmsg: enqueueing due periodic jobs failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
