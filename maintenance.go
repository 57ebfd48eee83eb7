package pgmsg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Maintenance defaults.
const (
	// TimeIndexStride is how many records one time index entry covers
	// (task log.time_index): a seek by time reads at most about this many
	// records past the entry it starts from.
	TimeIndexStride             = 10000
	MaintenanceIntervalDefault  = 10 * time.Second
	GroupTTLDefault             = 7 * 24 * time.Hour
	ProducerTTLDefault          = 7 * 24 * time.Hour
	RetentionBatchDefault       = 16
	MaintenanceMaxBatchesPerRun = 64
)

// MaintenanceConfig configures maintenance; nil means defaults.
type MaintenanceConfig struct {
	// Interval between runs, and between leadership attempts of a
	// non-leader. Default 10s.
	Interval time.Duration
	// GroupTTL expires groups without commits, members or creation for this
	// long, unless their topic sets group_ttl_ms. Default 7 days.
	GroupTTL time.Duration
	// ProducerTTL forgets idempotent producers (their last batch per
	// partition) idle for this long, as Kafka's
	// transactional.id.expiration.ms: a retry after that is stored again.
	// Default 7 days.
	ProducerTTL time.Duration
	// Batch is how many segments (or partitions to compact, or groups to
	// expire) one transaction handles. Default 16.
	Batch int
	// OnRun, if set, receives each run's result (for logs and metrics).
	OnRun func(*MaintenanceResult)
}

func (m *MaintenanceConfig) withDefaults() MaintenanceConfig {
	out := MaintenanceConfig{}
	if m != nil {
		out = *m
	}
	if out.Interval <= 0 {
		out.Interval = MaintenanceIntervalDefault
	}
	if out.GroupTTL <= 0 {
		out.GroupTTL = GroupTTLDefault
	}
	if out.ProducerTTL <= 0 {
		out.ProducerTTL = ProducerTTLDefault
	}
	if out.Batch <= 0 {
		out.Batch = RetentionBatchDefault
	}
	return out
}

// MaintenanceResult says what one maintenance run did.
type MaintenanceResult struct {
	SegmentsCreated  int   `json:"segments_created"`
	SegmentsDropped  int   `json:"segments_dropped"`
	GroupsExpired    int   `json:"groups_expired"`
	RecordsCompacted int64 `json:"records_compacted"`
	// Tasks has every task's result by name (log.retention, queue.rescue ...).
	Tasks map[string]TaskResult `json:"tasks"`
}

// TaskResult is one task's outcome in a run.
type TaskResult struct {
	Items    int64         `json:"items"`
	Duration time.Duration `json:"duration_ns"`
	Error    string        `json:"error,omitempty"`
}

// MaintenanceTask is a named maintenance step; features such as the queue
// add theirs with registerMaintenanceTask. It returns how many items it
// handled and must work in bounded batches and short transactions.
type MaintenanceTask struct {
	Name string
	Run  func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error)
}

var (
	tasksMu sync.Mutex
	tasks   []MaintenanceTask
)

func registerMaintenanceTask(t MaintenanceTask) {
	tasksMu.Lock()
	defer tasksMu.Unlock()
	tasks = append(tasks, t)
	sort.SliceStable(tasks, func(i, j int) bool { return tasks[i].Name < tasks[j].Name })
}

// maintenanceEventsKept is how long maintenance events are kept.
const maintenanceEventsKept = 30 * 24 * time.Hour

func init() {
	registerMaintenanceTask(MaintenanceTask{Name: "log.segments", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.store.SegmentsEnsure(ctx, c.pool)
		return int64(n), err
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "log.retention", Run: func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error) {
		var total int64
		for i := 0; i < MaintenanceMaxBatchesPerRun; i++ {
			rows, err := c.store.RetentionRun(ctx, c.pool, limit32(cfg.Batch))
			if err != nil {
				return total, err
			}
			for _, r := range rows {
				c.config.Logger.Info("pgmsg: retention dropped a segment", "topic", r.Topic, "partition", r.Partition,
					"start_offset", r.StartOffset, "end_offset", r.EndOffset, "reason", r.Reason, "groups_skipped", r.Skipped)
			}
			total += int64(len(rows))
			if len(rows) == 0 {
				break
			}
		}
		return total, nil
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "log.group_expiry", Run: func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error) {
		rows, err := c.store.GroupExpire(ctx, c.pool, cfg.GroupTTL, limit32(cfg.Batch))
		for _, r := range rows {
			c.config.Logger.Info("pgmsg: consumer group expired", "topic", r.Topic, "group", r.Group, "last_active", r.LastActive)
		}
		return int64(len(rows)), err
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "log.events_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.store.MaintenanceEventsPrune(ctx, c.pool, maintenanceEventsKept, 10000)
		return n, err
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "log.producer_expiry", Run: func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error) {
		return c.store.ProducerStateExpire(ctx, c.pool, cfg.ProducerTTL, 10000)
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "log.time_index", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.store.TimeIndexRun(ctx, c.pool, TimeIndexStride, 1<<20)
		return int64(n), err
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "log.compaction", Run: func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error) {
		rows, err := c.store.CompactRun(ctx, c.pool, limit32(cfg.Batch))
		var removed int64
		for _, r := range rows {
			removed += r.Removed
		}
		return removed, err
	}})
}

// MaintainOnce runs every maintenance task once, now, whether or not this
// process is the leader (tasks are safe to run concurrently; the leader
// just avoids duplicate work). `pgmsg maintenance run --once` calls it.
func (c *Client) MaintainOnce(ctx context.Context, cfg *MaintenanceConfig) (*MaintenanceResult, error) {
	conf := cfg.withDefaults()
	tasksMu.Lock()
	list := append([]MaintenanceTask(nil), tasks...)
	tasksMu.Unlock()
	res := &MaintenanceResult{Tasks: map[string]TaskResult{}}
	var errs []error
	for _, t := range list {
		start := time.Now()
		n, err := t.Run(ctx, c, conf)
		tr := TaskResult{Items: n, Duration: time.Since(start)}
		if err != nil {
			tr.Error = err.Error()
			errs = append(errs, fmt.Errorf("maintenance task %s: %w", t.Name, err))
		}
		res.Tasks[t.Name] = tr
	}
	res.SegmentsCreated = int(res.Tasks["log.segments"].Items)
	res.SegmentsDropped = int(res.Tasks["log.retention"].Items)
	res.GroupsExpired = int(res.Tasks["log.group_expiry"].Items)
	res.RecordsCompacted = res.Tasks["log.compaction"].Items
	if conf.OnRun != nil {
		conf.OnRun(res)
	}
	return res, errors.Join(errs...)
}

// RunMaintenance takes part in maintenance leader election until ctx ends.
// One process per schema is leader: it holds a session advisory lock on a
// dedicated connection and runs MaintainOnce every Interval. When the
// leader dies its connection closes, the lock is released, and another
// process running RunMaintenance takes over within one Interval.
func (c *Client) RunMaintenance(ctx context.Context, cfg *MaintenanceConfig) error {
	conf := cfg.withDefaults()
	for {
		err := c.leadMaintenance(ctx, conf)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			c.config.Logger.Warn("pgmsg: maintenance leadership lost or not available", "error", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(conf.Interval):
		}
	}
}

// maintenanceLockKey is the advisory lock that elects the leader.
func (c *Client) maintenanceLockKey() string { return "pgmsg.maintenance." + c.config.Schema }

// leadMaintenance tries to become leader; as leader it runs maintenance
// until ctx ends or the lock connection fails.
func (c *Client) leadMaintenance(ctx context.Context, conf MaintenanceConfig) error {
	conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var leader bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", c.maintenanceLockKey()).Scan(&leader); err != nil {
		return err
	}
	if !leader {
		return nil
	}
	c.setLeader(true)
	defer c.setLeader(false)
	c.config.Logger.Info("pgmsg: this process is the maintenance leader", "schema", c.config.Schema)
	// Periodic jobs' ticks are seconds apart, maintenance runs ten: the
	// leader enqueues due ticks on a loop of its own while it leads.
	pctx, stopPeriodic := context.WithCancel(ctx)
	periodicDone := make(chan struct{})
	go func() {
		defer close(periodicDone)
		c.runPeriodic(pctx)
	}()
	defer func() {
		stopPeriodic()
		<-periodicDone
	}()
	for {
		if _, err := c.MaintainOnce(ctx, &conf); err != nil && ctx.Err() == nil {
			c.config.Logger.Warn("pgmsg: maintenance run failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(conf.Interval):
		}
		// Still holding the lock? (The connection may have been cut.)
		if err := conn.Ping(ctx); err != nil {
			return fmt.Errorf("maintenance lock connection: %w", err)
		}
	}
}

// runPeriodic enqueues due periodic jobs every periodicEvery until ctx
// ends.
func (c *Client) runPeriodic(ctx context.Context) {
	t := time.NewTicker(periodicEvery)
	defer t.Stop()
	for {
		if _, err := c.EnqueueDuePeriodicJobs(ctx); err != nil && ctx.Err() == nil {
			c.config.Logger.Warn("pgmsg: enqueueing due periodic jobs failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Client) setLeader(v bool) {
	c.metaMu.Lock()
	c.leader = v
	c.metaMu.Unlock()
}

// IsMaintenanceLeader reports whether this client currently leads maintenance.
func (c *Client) IsMaintenanceLeader() bool {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	return c.leader
}

// MaintenanceEvent is one logged retention drop, skip, group expiry or compaction.
type MaintenanceEvent struct {
	ID        int64          `json:"id"`
	At        time.Time      `json:"at"`
	Kind      string         `json:"kind"`
	Topic     string         `json:"topic"`
	Group     string         `json:"group,omitempty"`
	Partition int32          `json:"partition"`
	Detail    map[string]any `json:"detail"`
}

// MaintenanceEvents returns the newest events, optionally of one kind
// (retention_drop, retention_skip, group_expired, compacted).
func (c *Client) MaintenanceEvents(ctx context.Context, kind string, limit int) ([]MaintenanceEvent, error) {
	rows, err := c.store.MaintenanceEvents(ctx, c.pool, kind, limit32(limit))
	if err != nil {
		return nil, err
	}
	out := make([]MaintenanceEvent, len(rows))
	for i, r := range rows {
		out[i] = MaintenanceEvent{ID: r.ID, At: r.At, Kind: r.Kind, Topic: r.Topic, Group: r.Group, Partition: r.Partition}
		_ = json.Unmarshal(r.Detail, &out[i].Detail)
	}
	return out, nil
}
