package pgmsg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pgmsg/pgmsg/internal/maintenance"
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

// MaintenanceTask is a named maintenance step; a run runs the client's
// fixed list of them in order, and their names are the keys of
// MaintenanceResult.Tasks. It returns how many items it handled and must
// work in bounded batches and short transactions.
type MaintenanceTask struct {
	Name string
	Run  func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error)
}

// maintenanceEventsKept is how long maintenance events are kept.
const maintenanceEventsKept = 30 * 24 * time.Hour

// maintenanceTasks is every maintenance task, in the order a run runs
// them: by name, the order runs had when init() functions registered the
// tasks. Their names are the keys of MaintenanceResult.Tasks, which
// pgmsgprom and the dashboard report.
//
// The queue's tasks: claims rescue expired leases of their own queue
// already, so queue.rescue covers queues nobody claims from;
// queue.archive_prune and queue.dead_prune keep the archive, and dead
// jobs, within each queue's retention; queue.periodic enqueues the due
// ticks of periodic jobs (the leader also does every second, as ticks can
// be seconds apart); queue.unique_prune removes passed uniqueness
// windows.
var maintenanceTasks = []MaintenanceTask{
	{Name: "log.compaction", Run: func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error) {
		rows, err := c.store.CompactRun(ctx, c.pool, limit32(cfg.Batch))
		var removed int64
		for _, r := range rows {
			removed += r.Removed
		}
		return removed, err
	}},
	{Name: "log.events_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.store.MaintenanceEventsPrune(ctx, c.pool, maintenanceEventsKept, 10000)
		return n, err
	}},
	{Name: "log.group_expiry", Run: func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error) {
		rows, err := c.store.GroupExpire(ctx, c.pool, cfg.GroupTTL, limit32(cfg.Batch))
		for _, r := range rows {
			c.config.Logger.Info("pgmsg: consumer group expired", "topic", r.Topic, "group", r.Group, "last_active", r.LastActive)
		}
		return int64(len(rows)), err
	}},
	{Name: "log.producer_expiry", Run: func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error) {
		return c.store.ProducerStateExpire(ctx, c.pool, cfg.ProducerTTL, 10000)
	}},
	{Name: "log.retention", Run: func(ctx context.Context, c *Client, cfg MaintenanceConfig) (int64, error) {
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
	}},
	{Name: "log.segments", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.store.SegmentsEnsure(ctx, c.pool)
		return int64(n), err
	}},
	{Name: "log.time_index", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.store.TimeIndexRun(ctx, c.pool, TimeIndexStride, 1<<20)
		return int64(n), err
	}},
	{Name: "queue.archive_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		return c.PruneArchive(ctx, "", nil)
	}},
	{Name: "queue.dead_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		return c.PruneDeadJobs(ctx, "")
	}},
	{Name: "queue.periodic", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		ticks, err := c.EnqueueDuePeriodicJobs(ctx)
		return int64(len(ticks)), err
	}},
	{Name: "queue.rescue", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.RescueJobs(ctx, "")
		return int64(n), err
	}},
	{Name: "queue.unique_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.store.JobUniquePrune(ctx, c.pool, 10000)
		return int64(n), err
	}},
}

// MaintainOnce runs every maintenance task once, now, whether or not this
// process is the leader (tasks are safe to run concurrently; the leader
// just avoids duplicate work). `pgmsg maintenance run --once` calls it.
func (c *Client) MaintainOnce(ctx context.Context, cfg *MaintenanceConfig) (*MaintenanceResult, error) {
	return c.maintain(ctx, cfg.withDefaults(), nil)
}

// maintenanceGatedTasks are the tasks RunMaintenance skips while the
// database's snapshot (pg_current_snapshot()) is the one read before the
// task's last successful run, for at most maintenanceGateRuns intervals.
// The same snapshot means no transaction has begun writing, committed or
// aborted since. The log's data tasks find work only in committed writes
// (records published, segments attached, settings changed), never in time
// passing: segments ahead of the published offsets, the time index of new
// records, compaction of partitions that received records since their
// last compaction (tombstones expire by time, but are looked at only
// then); skipped, they would have found what they found then. Retention
// (by size: data; by time: time) and group expiry (time) run at least
// every maintenanceGateRuns intervals, a minute at the default interval:
// a segment past its retention_ms or a group past its TTL goes up to a
// minute later in an idle database (Kafka checks retention every 5
// minutes and expired offsets every 10 by default). Each of these scans
// every partition or group: at 10,000 topics of 4 partitions 2 to 9 ms of
// server CPU each, ~30 ms a pass, six passes a minute, in an estate where
// nothing happens.
var maintenanceGatedTasks = map[string]bool{"log.segments": true, "log.time_index": true, "log.compaction": true,
	"log.retention": true, "log.group_expiry": true}

// maintenanceGateRuns is how many intervals a gated task is skipped at
// most: the bound too for work a run left for later without a
// transaction of its own to show it (a lock timeout on a table a reader
// held).
const maintenanceGateRuns = 6

// maintenanceGate is RunMaintenance's memory of each gated task's last
// successful run: the snapshot read before it, and when.
type maintenanceGate struct {
	last map[string]maintenanceMark
	// snapshot reads the database's snapshot (tests replace it).
	snapshot func(ctx context.Context) (string, error)
}

func (c *Client) newMaintenanceGate() *maintenanceGate {
	return &maintenanceGate{last: map[string]maintenanceMark{}, snapshot: func(ctx context.Context) (string, error) {
		var snap string
		err := c.pool.QueryRow(ctx, "SELECT pg_catalog.pg_current_snapshot()::text").Scan(&snap)
		return snap, err
	}}
}

type maintenanceMark struct {
	snap string
	at   time.Time
}

func (c *Client) maintain(ctx context.Context, conf MaintenanceConfig, gate *maintenanceGate) (*MaintenanceResult, error) {
	var snap string
	if gate != nil {
		var err error
		if snap, err = gate.snapshot(ctx); err != nil {
			snap = "" // run everything
		}
	}
	list := make([]maintenance.Task, len(maintenanceTasks))
	for i, t := range maintenanceTasks {
		run := func(ctx context.Context) (int64, error) { return t.Run(ctx, c, conf) }
		if gate != nil && maintenanceGatedTasks[t.Name] {
			run = func(ctx context.Context) (int64, error) {
				if m, ok := gate.last[t.Name]; ok && snap != "" && m.snap == snap && time.Since(m.at) < maintenanceGateRuns*conf.Interval {
					return 0, nil
				}
				n, err := t.Run(ctx, c, conf)
				if err != nil || snap == "" {
					delete(gate.last, t.Name)
				} else {
					gate.last[t.Name] = maintenanceMark{snap: snap, at: time.Now()}
				}
				return n, err
			}
		}
		list[i] = maintenance.Task{Name: t.Name, Run: run}
	}
	results, err := maintenance.RunOnce(ctx, list)
	res := &MaintenanceResult{Tasks: make(map[string]TaskResult, len(results))}
	for name, r := range results {
		tr := TaskResult{Items: r.Items, Duration: r.Duration}
		if r.Err != nil {
			tr.Error = r.Err.Error()
		}
		res.Tasks[name] = tr
	}
	res.SegmentsCreated = int(res.Tasks["log.segments"].Items)
	res.SegmentsDropped = int(res.Tasks["log.retention"].Items)
	res.GroupsExpired = int(res.Tasks["log.group_expiry"].Items)
	res.RecordsCompacted = res.Tasks["log.compaction"].Items
	if conf.OnRun != nil {
		conf.OnRun(res)
	}
	return res, err
}

// RunMaintenance takes part in maintenance leader election until ctx ends.
// One process per schema is leader: it holds a session advisory lock on a
// dedicated connection and runs MaintainOnce every Interval. When the
// leader dies its connection closes, the lock is released, and another
// process running RunMaintenance takes over within one Interval.
func (c *Client) RunMaintenance(ctx context.Context, cfg *MaintenanceConfig) error {
	conf := cfg.withDefaults()
	gate := c.newMaintenanceGate()
	return c.leader.Run(ctx, &maintenance.LeadConfig{
		ConnConfig: c.pool.Config().ConnConfig,
		Store:      c.store,
		Schema:     c.config.Schema,
		Logger:     c.config.Logger,
		Interval:   conf.Interval,
		Maintain: func(ctx context.Context) error {
			_, err := c.maintain(ctx, conf, gate)
			return err
		},
		PeriodicEvery: periodicEvery,
		Periodic: func(ctx context.Context) error {
			_, err := c.EnqueueDuePeriodicJobs(ctx)
			return err
		},
	})
}

// IsMaintenanceLeader reports whether this client currently leads maintenance.
func (c *Client) IsMaintenanceLeader() bool { return c.leader.IsLeader() }

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
