package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// QueueConfig is a queue's settings, the public pgmsgtype.QueueConfig. For
// QueueCreate and QueueUpdate a zero field is NULL: the default on create,
// unchanged on update. A negative MaxDepth, BackpressureTimeout,
// JobTimeout, DeadRetention, RateLimit, MaxRunning or KeyLimit (pgmsg's ...None
// constants and QueueBackpressureNoWait) is the SQL API's 0: no limit, no
// wait or none (removing the setting on update). Read back, every field is
// set: 0 is none, except a BackpressureTimeout of 0, which reads back as
// -1 (no wait; pgmsg.QueueBackpressureNoWait).
type QueueConfig = pgmsgtype.QueueConfig

// Queue is a queue and its settings as the SQL API returns them.
type Queue = pgmsgtype.Queue

// queueFromRow reads a queue as QueueCreate, QueueUpdate and QueueList
// return it (one shape: their rows convert to QueueListRow).
func queueFromRow(r *dbsqlc.QueueListRow) *Queue {
	return &Queue{Name: r.Name, QueueConfig: QueueConfig{
		MaxAttempts:         int(r.MaxAttempts),
		Lease:               micros(r.LeaseUs),
		RetryBackoff:        micros(r.RetryBackoffUs),
		RetryBackoffMax:     micros(r.RetryBackoffMaxUs),
		ArchiveRetention:    micros(r.ArchiveRetentionUs),
		MaxPayloadBytes:     int(r.MaxPayloadBytes),
		MaxDepth:            r.MaxDepth,
		BackpressureTimeout: noWaitIfZero(micros(r.BackpressureTimeoutUs)),
		JobTimeout:          micros(r.JobTimeoutUs),
		DeadRetention:       micros(r.DeadRetentionUs),
		RateLimit:           r.RateLimit,
		MaxRunning:          int(r.MaxRunning),
		KeyLimit:            int(r.KeyLimit),
		KeyField:            r.KeyField,
	}, CreatedAt: r.CreatedAt.Time}
}

// noWaitIfZero reads a backpressure timeout: the SQL API's 0 (refuse at
// once) is -1 in Go, where 0 means the default.
func noWaitIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// QueueCreate creates queue name with cfg (see QueueConfig); with
// ifNotExists an existing queue is returned as it is. It fails with
// errs.QueueExists, errs.InvalidName ...
func (s *Store) QueueCreate(ctx context.Context, exec DBTX, name string, cfg QueueConfig, ifNotExists bool) (*Queue, error) {
	row, err := s.q.QueueCreate(ctx, s.DB(exec), dbsqlc.QueueCreateParams{
		Name: name, MaxAttempts: optInt4(cfg.MaxAttempts), Lease: optInterval(cfg.Lease),
		RetryBackoff: optInterval(cfg.RetryBackoff), RetryBackoffMax: optInterval(cfg.RetryBackoffMax),
		ArchiveRetention: optInterval(cfg.ArchiveRetention), MaxPayloadBytes: optInt4(cfg.MaxPayloadBytes),
		IfNotExists: ifNotExists, MaxDepth: orZeroInt8(cfg.MaxDepth), BackpressureTimeout: orZeroInterval(cfg.BackpressureTimeout),
		JobTimeout: orZeroInterval(cfg.JobTimeout), DeadRetention: orZeroInterval(cfg.DeadRetention),
		RateLimit: orZeroFloat8(cfg.RateLimit), MaxRunning: orZeroInt4(cfg.MaxRunning),
		KeyLimit: orZeroInt4(cfg.KeyLimit), KeyField: keyField(cfg.KeyField),
	})
	if err != nil {
		return nil, errs.Map(err)
	}
	return queueFromRow((*dbsqlc.QueueListRow)(row)), nil
}

// QueueUpdate changes the non-zero settings of cfg (see QueueConfig). It
// fails with errs.UnknownQueue.
func (s *Store) QueueUpdate(ctx context.Context, exec DBTX, name string, cfg QueueConfig) (*Queue, error) {
	row, err := s.q.QueueUpdate(ctx, s.DB(exec), dbsqlc.QueueUpdateParams{
		Name: name, MaxAttempts: optInt4(cfg.MaxAttempts), Lease: optInterval(cfg.Lease),
		RetryBackoff: optInterval(cfg.RetryBackoff), RetryBackoffMax: optInterval(cfg.RetryBackoffMax),
		ArchiveRetention: optInterval(cfg.ArchiveRetention), MaxPayloadBytes: optInt4(cfg.MaxPayloadBytes),
		MaxDepth: orZeroInt8(cfg.MaxDepth), BackpressureTimeout: orZeroInterval(cfg.BackpressureTimeout),
		JobTimeout: orZeroInterval(cfg.JobTimeout), DeadRetention: orZeroInterval(cfg.DeadRetention),
		RateLimit: orZeroFloat8(cfg.RateLimit), MaxRunning: orZeroInt4(cfg.MaxRunning),
		KeyLimit: orZeroInt4(cfg.KeyLimit), KeyField: keyField(cfg.KeyField),
	})
	if err != nil {
		return nil, errs.Map(err)
	}
	return queueFromRow((*dbsqlc.QueueListRow)(row)), nil
}

// KeyFieldNone in a QueueConfig.KeyField removes the key field on update
// (pgmsg.QueueKeyFieldNone): a NUL, which no text PostgreSQL stores can
// hold, so no field is named so.
const KeyFieldNone = "\x00"

// keyField is a QueueConfig.KeyField for queue_create() and
// queue_update(): "" NULL (none, or unchanged), KeyFieldNone "" (removed).
func keyField(f string) pgtype.Text {
	if f == KeyFieldNone {
		return pgtype.Text{String: "", Valid: true}
	}
	return optText(f)
}

// QueueList returns every queue, by name.
func (s *Store) QueueList(ctx context.Context, exec DBTX) ([]*Queue, error) {
	rows, err := s.q.QueueList(ctx, s.DB(exec))
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]*Queue, len(rows))
	for i, r := range rows {
		out[i] = queueFromRow(r)
	}
	return out, nil
}

// QueueDelete removes a queue with its archive; force deletes its live
// jobs too, else a queue with some fails with errs.QueueNotEmpty.
func (s *Store) QueueDelete(ctx context.Context, exec DBTX, name string, force bool) error {
	return errs.Map(s.q.QueueDelete(ctx, s.DB(exec), dbsqlc.QueueDeleteParams{Name: name, Force: force}))
}

// QueuePause stops queue from handing out jobs (errs.UnknownQueue).
func (s *Store) QueuePause(ctx context.Context, exec DBTX, queue string) error {
	_, err := s.q.QueuePause(ctx, s.DB(exec), queue)
	return errs.Map(err)
}

// QueueResume lets a paused queue hand out jobs again (errs.UnknownQueue).
func (s *Store) QueueResume(ctx context.Context, exec DBTX, queue string) error {
	_, err := s.q.QueueResume(ctx, s.DB(exec), queue)
	return errs.Map(err)
}

// QueueStats is one queue's job counts by state (pgmsg.QueueStats without
// the derived throughput).
type QueueStats struct {
	Queue                                                            string
	Available, Scheduled, Running, Retrying, Dead, Archived, Pending int64
	// OldestAvailableAge is how long the oldest available job has waited.
	OldestAvailableAge time.Duration
	ArchivedLastMinute int64
	Paused             bool
}

// QueueStats returns the job counts of queue ("": of every queue, by
// name).
func (s *Store) QueueStats(ctx context.Context, exec DBTX, queue string) ([]QueueStats, error) {
	rows, err := s.q.QueueStats(ctx, s.DB(exec), optText(queue))
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]QueueStats, len(rows))
	for i, r := range rows {
		out[i] = QueueStats{Queue: r.Queue, Available: r.Available, Scheduled: r.Scheduled, Running: r.Running,
			Retrying: r.Retrying, Dead: r.Dead, Archived: r.Archived, Pending: r.Pending,
			OldestAvailableAge: time.Duration(r.OldestAvailableSeconds * float64(time.Second)),
			ArchivedLastMinute: r.ArchivedLastMinute, Paused: r.Paused}
	}
	return out, nil
}

// queueLimitedSQL says whether a queue has a rate limit or running cap.
const queueLimitedSQL = `SELECT qq.rate_limit IS NOT NULL OR qq.max_running IS NOT NULL FROM pgmsg.queue qq WHERE qq.name = $1`

// QueueLimited reports whether queue has a rate limit or a running cap;
// pgx.ErrNoRows when it does not exist.
func (s *Store) QueueLimited(ctx context.Context, exec DBTX, queue string) (bool, error) {
	var limited bool
	err := exec.QueryRow(ctx, s.SQL(queueLimitedSQL), queue).Scan(&limited)
	return limited, errs.Map(err)
}

// ArchivePrune deletes at most maxJobs archived jobs of queue ("": every
// queue) older than olderThan (0: each queue's retention) and returns how
// many.
func (s *Store) ArchivePrune(ctx context.Context, exec DBTX, queue string, olderThan time.Duration, maxJobs int32) (int32, error) {
	n, err := s.q.ArchivePrune(ctx, s.DB(exec), dbsqlc.ArchivePruneParams{Queue: optText(queue), OlderThan: optInterval(olderThan),
		MaxJobs: maxJobs})
	return n, errs.Map(err)
}

// DeadPrune deletes at most maxJobs dead jobs of queue ("": every queue)
// past their queue's dead retention and returns how many.
func (s *Store) DeadPrune(ctx context.Context, exec DBTX, queue string, maxJobs int32) (int32, error) {
	n, err := s.q.DeadPrune(ctx, s.DB(exec), dbsqlc.DeadPruneParams{Queue: optText(queue), MaxJobs: maxJobs})
	return n, errs.Map(err)
}

// JobRescue makes at most maxJobs jobs of queue ("": every queue) whose
// lease expired claimable again (or dead) and returns how many.
func (s *Store) JobRescue(ctx context.Context, exec DBTX, queue string, maxJobs int32) (int32, error) {
	n, err := s.q.JobRescue(ctx, s.DB(exec), dbsqlc.JobRescueParams{Queue: optText(queue), MaxJobs: maxJobs})
	return n, errs.Map(err)
}

// JobUniquePrune deletes at most maxRows passed uniqueness windows and
// returns how many.
func (s *Store) JobUniquePrune(ctx context.Context, exec DBTX, maxRows int32) (int32, error) {
	n, err := s.q.JobUniquePrune(ctx, s.DB(exec), maxRows)
	return n, errs.Map(err)
}
