package pgmsg

import "net/http"

// Queue sentinel errors. Like the log's, each matches with errors.Is, has a
// stable code (Error.Code) that the SQL API raises as its SQLSTATE, and keeps
// the *pgconn.PgError reachable with errors.As when the database raised it.
var (
	// ErrUnknownQueue is returned when a queue does not exist: by claims,
	// stats and dead-letter tools, and by enqueues with
	// EnqueueOpts.DisableCreateQueue (PM101).
	ErrUnknownQueue = newSentinel("unknown queue", "PM101", "unknown_queue", http.StatusNotFound)
	// ErrQueueExists is returned by CreateQueue when the name is taken (PM102).
	ErrQueueExists = newSentinel("queue already exists", "PM102", "queue_exists", http.StatusConflict)
	// ErrPayloadTooLarge is returned by Enqueue when a payload exceeds the
	// queue's MaxPayloadBytes (PM103). Nothing of the batch is written.
	ErrPayloadTooLarge = newSentinel("payload too large", "PM103", "payload_too_large", http.StatusRequestEntityTooLarge)
	// ErrInvalidDelay is returned for a negative delay, snooze or retry
	// delay (PM104). Nothing is written.
	ErrInvalidDelay = newSentinel("invalid delay", "PM104", "invalid_delay", http.StatusBadRequest)
	// ErrInvalidMaxAttempts is returned for max attempts below 1, on a job or
	// a queue (PM105). Nothing is written.
	ErrInvalidMaxAttempts = newSentinel("invalid max attempts", "PM105", "invalid_max_attempts", http.StatusBadRequest)
	// ErrJobNotHeld is returned by Complete, Fail, Snooze and ExtendJob when
	// the caller's claim no longer holds the job: it was completed, failed,
	// snoozed or cancelled, or its lease expired and it was rescued (and
	// perhaps claimed again) (PM106). Nothing is written.
	ErrJobNotHeld = newSentinel("job not held", "PM106", "job_not_held", http.StatusConflict)
	// ErrUnknownJob is returned when no job, live or archived, has the id
	// (PM107).
	ErrUnknownJob = newSentinel("unknown job", "PM107", "unknown_job", http.StatusNotFound)
	// ErrQueueNotEmpty is returned by DeleteQueue when the queue still has
	// live jobs and force was not given (PM108).
	ErrQueueNotEmpty = newSentinel("queue not empty", "PM108", "queue_not_empty", http.StatusConflict)
	// ErrQueueFull is returned by enqueues that would put more live jobs
	// (waiting or running) in a queue than its MaxDepth (PM109). Enqueue
	// and EnqueueMany first retry for up to the queue's
	// BackpressureTimeout (default 5s); EnqueueTx and EnqueueManyTx fail at
	// once. Nothing of the batch was written. IsRetryable reports true.
	ErrQueueFull = newSentinel("queue full", "PM109", "queue_full", http.StatusTooManyRequests)
	// ErrJobNotWaiting is returned by RetryJob for a job that is running,
	// dead or finished: only a scheduled or retrying job can be made
	// claimable now (PM110).
	ErrJobNotWaiting = newSentinel("job not waiting", "PM110", "job_not_waiting", http.StatusConflict)
	// ErrUnknownPeriodicJob is returned by RemovePeriodicJob when the queue
	// has no periodic job of that name (PM111).
	ErrUnknownPeriodicJob = newSentinel("unknown periodic job", "PM111", "unknown_periodic_job", http.StatusNotFound)
	// ErrInvalidSchedule is returned for a periodic job's schedule or time
	// zone that cannot be read, or a schedule that never fires (PM112).
	ErrInvalidSchedule = newSentinel("invalid schedule", "PM112", "invalid_schedule", http.StatusBadRequest)
	// ErrJobTimeout is the cause of a handler's context cancelled because
	// the job ran longer than WorkerOpts.JobTimeout; the attempt fails with
	// it (context.Cause(ctx) tells a handler why it was cancelled).
	ErrJobTimeout = newSentinel("job timed out", "", "job_timeout", http.StatusRequestTimeout)
)
