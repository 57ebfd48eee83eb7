package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/jobdoc"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

var tagRE = regexp.MustCompile(`^[A-Za-z0-9._:/=@+-]{1,100}$`)

// tenantRE is _tenant_check()'s rule for a tenant name.
var tenantRE = regexp.MustCompile(`^[A-Za-z0-9._:/=@+-]{1,200}$`)

// CheckTenant refuses a tenant name that _tenant_check() refuses
// (errs.InvalidTenant, PM118); "" is none and passes.
func CheckTenant(what, tenant string) error {
	if tenant != "" && !tenantRE.MatchString(tenant) {
		return errs.New(errs.InvalidTenant, "%s: tenant %q: a tenant is 1 to %d of A-Z a-z 0-9 . _ : / = @ + -", what, tenant, TenantMaxBytes)
	}
	return nil
}

// TagsJSON checks job i's tags as _job_tags() does and encodes them for
// enqueue_many() (nil: none).
func TagsJSON(i int, tags []string) ([]byte, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	if len(tags) > TagsMax {
		return nil, errs.New(errs.InvalidArgument, "job %d: at most %d tags, got %d", i, TagsMax, len(tags))
	}
	for _, t := range tags {
		if !tagRE.MatchString(t) {
			return nil, errs.New(errs.InvalidArgument, "job %d: tag %q: a tag is 1 to 100 of A-Z a-z 0-9 . _ : / = @ + -", i, t)
		}
	}
	return json.Marshal(tags)
}

// Enqueue adds params to queue in one statement on exec and returns one
// result per job, in order; createQueue creates a missing queue with
// default settings (else ErrUnknownQueue). The caller has checked the
// queue's name and that params is not empty (the root does, before its
// span starts). Bad input fails the whole batch and writes nothing; a
// full queue fails at once with ErrQueueFull (RoomWait says whether and how
// long the root's errs.RetryWhile waits and tries again).
func (q *Queues) Enqueue(ctx context.Context, exec store.DBTX, queue string, params []pgmsgtype.EnqueueParams, createQueue bool) (res []*pgmsgtype.EnqueueResult, err error) {
	// The call's "publish" span: each job's metadata gets its trace
	// context (a copy of params; the caller's slice is not changed).
	params, endSpan := q.cfg.Tracer.StartEnqueue(ctx, queue, params)
	defer func() { endSpan(err) }()
	batch, err := q.jobBatch(queue, params, createQueue)
	if err != nil {
		return nil, err
	}
	out := make([]*pgmsgtype.EnqueueResult, len(params))
	if err := q.store.JobEnqueueMany(ctx, exec, &batch, func(i int, r store.JobEnqueued) {
		out[i] = &pgmsgtype.EnqueueResult{ID: r.ID, Duplicate: r.Duplicate, State: pgmsgtype.JobState(r.State), RunAt: r.RunAt}
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// EnqueueBatch enqueues params into queue as Enqueue does, as one batch
// with the callbacks cb (job_enqueue_batch()), and returns the batch's id
// with the jobs' results.
func (q *Queues) EnqueueBatch(ctx context.Context, exec store.DBTX, queue string, params []pgmsgtype.EnqueueParams, createQueue bool, cb store.BatchCallbacks) (id int64, res []*pgmsgtype.EnqueueResult, err error) {
	params, endSpan := q.cfg.Tracer.StartEnqueue(ctx, queue, params)
	defer func() { endSpan(err) }()
	batch, err := q.jobBatch(queue, params, createQueue)
	if err != nil {
		return 0, nil, err
	}
	out := make([]*pgmsgtype.EnqueueResult, len(params))
	id, err = q.store.JobEnqueueBatch(ctx, exec, &batch, cb, func(i int, r store.JobEnqueued) {
		out[i] = &pgmsgtype.EnqueueResult{ID: r.ID, Duplicate: r.Duplicate, State: pgmsgtype.JobState(r.State), RunAt: r.RunAt}
	})
	if err != nil {
		return 0, nil, err
	}
	return id, out, nil
}

// BatchGet returns batch id (errs.UnknownBatch).
func (q *Queues) BatchGet(ctx context.Context, id int64) (*store.Batch, error) {
	return q.store.BatchGet(ctx, q.pool, id)
}

// jobBatch checks params and returns them as the arrays an enqueue sends.
func (q *Queues) jobBatch(queue string, params []pgmsgtype.EnqueueParams, createQueue bool) (store.JobBatch, error) {
	n := len(params)
	batch := store.NewJobBatch(queue, n, createQueue)
	durationMax := q.cfg.DurationMax
	// The per-job checks stay in Go although enqueue_many() makes them all
	// with the same codes: the direct statement (store.JobEnqueueDirect),
	// which most batches take, makes none of them, and having it decline
	// to enqueue_many() for them would cost the same tests on its common
	// path; and enqueue_many() checks windows, tags, metadata and payload
	// sizes (PM103) first, batch-wide, so a batch with two faults would get
	// another code. Durations under 1µs would be sent as 0 (none).
	for i, p := range params {
		switch {
		case p.Delay < 0:
			return store.JobBatch{}, errs.New(errs.InvalidDelay, "job %d: delay must not be negative, got %s", i, p.Delay)
		case p.MaxAttempts < 0:
			return store.JobBatch{}, errs.New(errs.InvalidMaxAttempts, "job %d: max attempts must be at least 1, got %d", i, p.MaxAttempts)
		case p.Priority < PriorityMin || p.Priority > PriorityMax:
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: priority must be between %d and %d, got %d", i, PriorityMin, PriorityMax, p.Priority)
		case !p.RunAt.IsZero() && p.Delay != 0:
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: give RunAt or Delay, not both", i)
		case len(p.Kind) > KindMaxBytes:
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: kind must be at most %d bytes, got %d", i, KindMaxBytes, len(p.Kind))
		case len(p.UniqueKey) > UniqueKeyMaxBytes:
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: unique key must be at most %d bytes, got %d", i, UniqueKeyMaxBytes, len(p.UniqueKey))
		case p.UniqueFor != 0 && (p.UniqueKey == "" || p.UniqueFor < time.Second || p.UniqueFor > durationMax):
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: a uniqueness window needs a unique key and lasts from 1s to %s, got %s", i, durationMax, p.UniqueFor)
		case len(p.SequenceKey) > SequenceKeyMaxBytes:
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: sequence key must be at most %d bytes, got %d", i, SequenceKeyMaxBytes, len(p.SequenceKey))
		case p.SequenceContinue && p.SequenceKey == "":
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: sequence continue needs a sequence key", i)
		case len(p.LimitKey) > LimitKeyMaxBytes:
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: limit key must be at most %d bytes, got %d", i, LimitKeyMaxBytes, len(p.LimitKey))
		case p.LimitKey != "" && p.SequenceKey != "":
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: give a sequence key or a limit key, not both", i)
		case len(p.DependsOn)+len(p.DependsOnNames) > DependsOnMax:
			return store.JobBatch{}, errs.New(errs.TooManyDeps, "job %d has more than %d dependencies", i, DependsOnMax)
		case len(p.Name) > JobNameMaxBytes:
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: name must be at most %d bytes, got %d", i, JobNameMaxBytes, len(p.Name))
		case p.Timeout < 0 || (p.Timeout > 0 && p.Timeout < time.Microsecond) || p.Timeout > durationMax:
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: timeout must be from 1µs to %s (0: the queue's), got %s", i, durationMax, p.Timeout)
		}
		if p.Tenant != "" {
			if err := CheckTenant(fmt.Sprintf("job %d", i), p.Tenant); err != nil {
				return store.JobBatch{}, err
			}
		}
		if !p.RunAt.IsZero() {
			// A time pgx can send and PostgreSQL hold (enqueue_many()
			// refuses the other years outside 0001..9999, PM004, too).
			if err := q.cfg.CheckTime(fmt.Sprintf("job %d: run at", i), p.RunAt); err != nil {
				return store.JobBatch{}, err
			}
		}
		tags, err := TagsJSON(i, p.Tags)
		if err != nil {
			return store.JobBatch{}, err
		}
		var md json.RawMessage
		if p.Metadata != nil {
			// The document's name is formatted only for a job that has
			// one: a string per job was a tenth of a batch's allocations.
			if md, err = jobdoc.Encode(fmt.Sprintf("%d metadata", i), p.Metadata); err != nil {
				return store.JobBatch{}, err
			}
		}
		if md != nil && !bytes.HasPrefix(bytes.TrimSpace(md), []byte("{")) {
			return store.JobBatch{}, errs.New(errs.InvalidArgument, "job %d: metadata must be a JSON object", i)
		}
		deps, err := dependsOnJSON(&p)
		if err != nil {
			return store.JobBatch{}, err
		}
		batch.Set(i, &store.JobParams{Payload: p.Payload, Kind: p.Kind, Priority: p.Priority, RunAt: p.RunAt, Delay: p.Delay,
			MaxAttempts: p.MaxAttempts, UniqueKey: p.UniqueKey, UniqueFor: p.UniqueFor, Timeout: p.Timeout, Tags: tags, Metadata: md,
			SequenceKey: p.SequenceKey, SequenceContinue: p.SequenceContinue, LimitKey: p.LimitKey,
			Name: p.Name, DependsOn: deps, DepsIgnoreCancelled: p.IgnoreCancelledDeps, DepsIgnoreDead: p.IgnoreDeadDeps,
			Tenant: p.Tenant})
	}
	return batch, nil
}

// RoomWait reports whether err, an enqueue's outcome, is a full queue
// (ErrQueueFull) that an enqueue outside a caller's transaction waits out
// by trying again, and for how long: PM109 carries the queue's
// BackpressureTimeout. Inside a caller's transaction the wait would hold
// its locks, so the Tx forms fail at once. The root runs the retries
// (errs.RetryWhile, the publishes' wait too), calling its enqueue directly: a
// closure handed through a function value would be allocated per call.
func (q *Queues) RoomWait(err error) (time.Duration, bool) {
	wait, ok := errs.BackpressureWait(err)
	return wait, ok && errors.Is(err, errs.QueueFull)
}

// dependsOnJSON encodes a job's dependencies for enqueue_many() as its one
// JSON array of ids and names (nil: none).
func dependsOnJSON(p *pgmsgtype.EnqueueParams) ([]byte, error) {
	if len(p.DependsOn) == 0 && len(p.DependsOnNames) == 0 {
		return nil, nil
	}
	deps := make([]any, 0, len(p.DependsOn)+len(p.DependsOnNames))
	for _, id := range p.DependsOn {
		deps = append(deps, id)
	}
	for _, n := range p.DependsOnNames {
		deps = append(deps, n)
	}
	return json.Marshal(deps)
}
