package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pgmsg/pgmsg/internal/queue"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/internal/telemetry"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Jobs is the Queue of a Worker on the database: the Client's queue
// engine (internal/queue), store and pool, bound to one queue and the
// worker's claim options, opening the worker's spans
// (internal/telemetry). pgmsg.NewWorker fills it in.
type Jobs struct {
	Queues *queue.Queues
	Store  *store.Store
	Pool   *pgxpool.Pool
	Tracer *telemetry.Tracer
	Queue  string
	// Lease is pgmsg.WorkerOpts.Lease (0: the queue's), Name the worker's
	// name on its claims, MaxBytes its claims' payload cap (0: none).
	Lease    time.Duration
	Name     string
	MaxBytes int64
}

// Claim claims up to n jobs on the pool (the direct statement when it
// covers the case), reads the trace contexts they carry when tracing is
// on, and records the claim's "receive" span.
func (q *Jobs) Claim(ctx context.Context, n int) ([]*pgmsgtype.Job, map[int64]propagation.MapCarrier, error) {
	start := time.Now()
	jobs, err := q.Queues.Claim(ctx, q.Pool, q.Queue, queue.ClaimOpts{Max: n, Lease: q.Lease, Worker: q.Name, MaxBytes: q.MaxBytes}, true)
	traces := q.traces(ctx, jobs)
	q.Tracer.JobClaim(ctx, start, q.Queue, jobs, err)
	return jobs, traces, err
}

// traces reads the trace contexts that jobs carry in their metadata, by
// job id (when tracing is on; nil otherwise), with one statement. A
// failure leaves jobs without one: tracing never fails a claim.
func (q *Jobs) traces(ctx context.Context, jobs []*pgmsgtype.Job) map[int64]propagation.MapCarrier {
	if !q.Tracer.On() || len(jobs) == 0 {
		return nil
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	out := make(map[int64]propagation.MapCarrier, len(jobs))
	_ = q.Store.JobTraces(ctx, q.Pool, ids, func(id int64, parent, st string) {
		out[id] = telemetry.JobCarrier(parent, st)
	})
	return out
}

// CompleteMany archives jobs in one statement, in a "complete" span.
func (q *Jobs) CompleteMany(ctx context.Context, jobs []*pgmsgtype.Job, logs []string) ([]int64, error) {
	endSpan := q.Tracer.StartJobSettle(ctx, q.Queue, len(jobs))
	_, notHeld, err := q.Queues.CompleteMany(ctx, q.Pool, jobs, logs)
	endSpan(err)
	if err != nil {
		return nil, err
	}
	return notHeld, nil
}

func (q *Jobs) Fail(ctx context.Context, job *pgmsgtype.Job, jobErr error, dead bool, log string) error {
	_, _, err := q.Queues.Fail(ctx, q.Pool, job, jobErr, 0, dead, log)
	return err
}

func (q *Jobs) Snooze(ctx context.Context, job *pgmsgtype.Job, delay time.Duration, log string) error {
	_, err := q.Queues.Snooze(ctx, q.Pool, job, delay, log)
	return err
}

func (q *Jobs) Steps(ctx context.Context, job *pgmsgtype.Job) ([]pgmsgtype.JobStep, error) {
	return q.Queues.Steps(ctx, job.ID)
}

func (q *Jobs) SaveStep(ctx context.Context, job *pgmsgtype.Job, name string, output []byte) error {
	return q.Queues.SaveStep(ctx, job, name, output)
}

func (q *Jobs) ExtendLeases(ctx context.Context, ids, tokens []int64) ([]int64, error) {
	return q.Queues.ExtendLeases(ctx, ids, tokens, q.Lease)
}

func (q *Jobs) Limited() bool { return q.Queues.Limited(q.Queue) }

func (q *Jobs) StartProcessSpan(ctx context.Context, job *pgmsgtype.Job, carrier propagation.MapCarrier) (context.Context, func(error)) {
	return q.Tracer.StartJobProcess(ctx, job, carrier)
}
