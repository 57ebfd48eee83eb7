package pgmsg

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
)

// BatchCallback is a job that a batch enqueues once every job of it is
// final (see EnqueueBatch). The callback job's metadata is Metadata's with
// the batch under "batch": {"id", "callback" ("complete", "discard" or
// "finished"), "total", "completed", "cancelled", "dead"}.
type BatchCallback struct {
	// Kind is the job's kind, 1 to KindMaxBytes bytes (required).
	Kind string `json:"kind"`
	// Args, encoded as JSON, is the job's payload; nil for an empty one.
	Args any `json:"args,omitempty"`
	// Queue is the job's queue, created if need be; "" is the batch's.
	Queue string `json:"queue,omitempty"`
	// Priority is the job's priority (EnqueueParams.Priority).
	Priority int `json:"priority,omitempty"`
	// Metadata is a JSON object (nil: none) kept with the job.
	Metadata any `json:"metadata,omitempty"`
}

// BatchOpts are the callbacks and options of EnqueueBatch; nil means none.
type BatchOpts struct {
	// OnComplete is enqueued when every job of the batch completed.
	OnComplete *BatchCallback
	// OnDiscard is enqueued when every job is final and at least one did
	// not complete: it went dead, or was cancelled or deleted while live.
	OnDiscard *BatchCallback
	// OnFinished is enqueued when every job is final, whatever the outcome
	// (with OnComplete or OnDiscard, after it).
	OnFinished *BatchCallback
	// DisableCreateQueue: fail with ErrUnknownQueue instead of creating
	// the batch's queue (EnqueueOpts.DisableCreateQueue).
	DisableCreateQueue bool
}

// BatchResult is what EnqueueBatch did: the batch's id and each job's
// result, in the order given.
type BatchResult struct {
	ID   int64            `json:"batch_id"`
	Jobs []*EnqueueResult `json:"jobs"`
}

// EnqueueBatch enqueues params into queue in one transaction as one batch,
// all or nothing, as EnqueueMany does (the jobs may have every option of
// EnqueueParams, dependencies among them included). Once every job of the
// batch is final, its callbacks are enqueued, each at most once, in the
// transaction that made the last job final:
//
//   - final means completed, cancelled (CancelJob, or a dependency that
//     failed), deleted while live (its queue deleted), or dead. A job
//     counts by the first final state it reached: a dead job later
//     cancelled or purged stays dead. A retrying job is not final; a dead
//     job requeued (RequeueDeadJobs) before the batch finished is live
//     again, after it finished changes nothing.
//   - OnComplete if every job completed, else OnDiscard; then OnFinished.
//
// A duplicate (EnqueueResult.Duplicate: an existing job returned for a
// unique key) is not a member; a batch without a new job finishes at once.
// An empty batch fails with ErrEmptyBatch, a bad callback with
// ErrInvalidBatchCallback; the other errors are EnqueueMany's. Each job
// that becomes final costs the batch's counter one update, spread over up
// to 16 rows per batch so that workers seldom wait on each other.
func (c *Client) EnqueueBatch(ctx context.Context, queue string, params []EnqueueParams, opts *BatchOpts) (*BatchResult, error) {
	var res *BatchResult
	enqueue := func() (err error) {
		res, err = c.EnqueueBatchTx(ctx, c.pool, queue, params, opts)
		return err
	}
	err := enqueue()
	if wait, ok := c.queues.RoomWait(err); ok {
		err = errs.RetryWhile(ctx, ErrQueueFull, wait, err, enqueue)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// EnqueueBatchTx is EnqueueBatch on exec (see EnqueueManyTx): the batch is
// enqueued if the caller's transaction commits.
func (c *Client) EnqueueBatchTx(ctx context.Context, exec DBTX, queue string, params []EnqueueParams, opts *BatchOpts) (*BatchResult, error) {
	if err := ValidateName("queue", queue); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, newError(ErrEmptyBatch, "empty batch: a batch needs at least one job")
	}
	var o BatchOpts
	if opts != nil {
		o = *opts
	}
	var cb store.BatchCallbacks
	for _, x := range []struct {
		what string
		cb   *BatchCallback
		dst  *[]byte
	}{{"on_complete", o.OnComplete, &cb.OnComplete}, {"on_discard", o.OnDiscard, &cb.OnDiscard},
		{"on_finished", o.OnFinished, &cb.OnFinished}} {
		if x.cb == nil {
			continue
		}
		b, err := json.Marshal(x.cb)
		if err != nil {
			return nil, errs.New(errs.InvalidCallback, "invalid batch callback %s: %v", x.what, err)
		}
		if bytes.Contains(b, []byte(`\u0000`)) {
			return nil, errs.New(errs.InvalidCallback, "invalid batch callback %s: a NUL character (\\u0000), which PostgreSQL's jsonb cannot store", x.what)
		}
		*x.dst = b
	}
	id, jobs, err := c.queues.EnqueueBatch(ctx, exec, queue, params, !o.DisableCreateQueue, cb)
	if err != nil {
		return nil, err
	}
	return &BatchResult{ID: id, Jobs: jobs}, nil
}

// Batch is a batch of jobs, as GetBatch reports it.
type Batch struct {
	ID        int64     `json:"id"`
	Queue     string    `json:"queue"`
	Total     int       `json:"total"`
	CreatedAt time.Time `json:"created_at"`
	// The live jobs by state.
	Pending   int64 `json:"pending"`
	Available int64 `json:"available"`
	Scheduled int64 `json:"scheduled"`
	Retrying  int64 `json:"retrying"`
	Running   int64 `json:"running"`
	// The final jobs by how they ended (Cancelled: deleted ones too),
	// counted when they became final: pruning the archive or purging dead
	// jobs does not change them.
	Completed int64 `json:"completed"`
	Cancelled int64 `json:"cancelled"`
	Dead      int64 `json:"dead"`
	// FinishedAt is when every job was final (nil: not yet).
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// The callbacks as given (nil: none).
	OnComplete json.RawMessage `json:"on_complete,omitempty"`
	OnDiscard  json.RawMessage `json:"on_discard,omitempty"`
	OnFinished json.RawMessage `json:"on_finished,omitempty"`
	// The callback jobs enqueued (0: none).
	CompleteJobID int64 `json:"complete_job_id,omitempty"`
	DiscardJobID  int64 `json:"discard_job_id,omitempty"`
	FinishedJobID int64 `json:"finished_job_id,omitempty"`
}

// GetBatch returns batch id: its jobs' counts by state and, once finished,
// the callback jobs it enqueued. It fails with ErrUnknownBatch.
func (c *Client) GetBatch(ctx context.Context, id int64) (*Batch, error) {
	r, err := c.queues.BatchGet(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Batch{ID: r.ID, Queue: r.Queue, Total: r.Total, CreatedAt: r.CreatedAt, Pending: r.Pending,
		Available: r.Available, Scheduled: r.Scheduled, Retrying: r.Retrying, Running: r.Running,
		Completed: r.Completed, Cancelled: r.Cancelled, Dead: r.Dead, FinishedAt: r.FinishedAt,
		OnComplete: r.OnComplete, OnDiscard: r.OnDiscard, OnFinished: r.OnFinished,
		CompleteJobID: r.CompleteJobID, DiscardJobID: r.DiscardJobID, FinishedJobID: r.FinishedJobID}, nil
}
