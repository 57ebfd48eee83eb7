package pgmsg

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// JobArgs are the typed arguments of one kind of job: Kind names the kind
// (EnqueueParams.Kind) and the value itself, encoded as JSON, is the job's
// payload. Define Kind on the value receiver: Kinds reads it from T's zero
// value.
type JobArgs interface{ Kind() string }

// NewJob returns the EnqueueParams of a job of args' kind with args as its
// JSON payload; set the other fields (Priority, RunAt, UniqueKey ...) on
// the result and pass it to Enqueue, EnqueueMany or their Tx forms.
func NewJob(args JobArgs) (EnqueueParams, error) {
	if args == nil {
		return EnqueueParams{}, newError(ErrInvalidArgument, "nil job args")
	}
	payload, err := JSONPayload(args)
	if err != nil {
		return EnqueueParams{}, err
	}
	return EnqueueParams{Kind: args.Kind(), Payload: payload}, nil
}

// Kinds routes the jobs of a queue to one typed handler per kind, so that
// one Worker (one pool of handlers) serves several kinds:
//
//	kinds := pgmsg.NewKinds()
//	pgmsg.AddKind(kinds, func(ctx context.Context, job *pgmsg.Job, args EmailArgs) error { ... })
//	pgmsg.AddKind(kinds, func(ctx context.Context, job *pgmsg.Job, args ReportArgs) error { ... })
//	w, err := client.NewWorker("default", kinds.Handle, nil)
//
// Safe for concurrent use; add kinds before the worker runs.
type Kinds struct {
	mu       sync.RWMutex
	handlers map[string]JobHandler
}

// NewKinds returns an empty set of kinds.
func NewKinds() *Kinds { return &Kinds{handlers: map[string]JobHandler{}} }

// AddKind registers handle for the jobs whose kind is T's: each job's
// payload is decoded from JSON into a T before handle runs. It panics if
// T's kind is empty or already registered, as http.ServeMux does for a
// pattern registered twice: both are programming errors.
func AddKind[T JobArgs](k *Kinds, handle func(ctx context.Context, job *Job, args T) error) {
	var zero T
	kind := zero.Kind()
	if kind == "" {
		panic(fmt.Sprintf("pgmsg: AddKind: %T has an empty Kind", zero))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, dup := k.handlers[kind]; dup {
		panic(fmt.Sprintf("pgmsg: AddKind: kind %q registered twice", kind))
	}
	k.handlers[kind] = func(ctx context.Context, job *Job) error {
		var args T
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			// No retry can make the payload decode.
			return JobDiscard(fmt.Errorf("pgmsg: job %d of kind %q: payload does not decode into %T: %w", job.ID, kind, args, err))
		}
		return handle(ctx, job, args)
	}
}

// Handle is the JobHandler that dispatches: pass it to NewWorker or Work. A
// job whose kind has no handler fails its attempt with ErrUnknownKind, so
// it is retried with backoff (a newer deployment of the worker may know
// the kind) and ends in the dead-letter state after its last attempt; one
// whose payload does not decode is sent there at once (JobDiscard).
func (k *Kinds) Handle(ctx context.Context, job *Job) error {
	k.mu.RLock()
	h, ok := k.handlers[job.Kind]
	k.mu.RUnlock()
	if !ok {
		return newError(ErrUnknownKind, "no handler for job kind %q (job %d)", job.Kind, job.ID)
	}
	return h(ctx, job)
}
