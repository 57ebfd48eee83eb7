package pgmsg

import "errors"

// Queue sentinel errors. Like the log's, each matches with errors.Is, has a
// stable code (Error.Code) that the SQL API raises as its SQLSTATE, and keeps
// the *pgconn.PgError reachable with errors.As when the database raised it.
var (
	// ErrUnknownQueue is returned when a queue does not exist: by claims,
	// stats and dead-letter tools, and by enqueues with
	// EnqueueOpts.DisableCreateQueue (PM101).
	ErrUnknownQueue = errors.New("unknown queue")
	// ErrQueueExists is returned by CreateQueue when the name is taken (PM102).
	ErrQueueExists = errors.New("queue already exists")
	// ErrPayloadTooLarge is returned by Enqueue when a payload exceeds the
	// queue's MaxPayloadBytes (PM103). Nothing of the batch is written.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrInvalidDelay is returned for a negative delay, snooze or retry
	// delay (PM104). Nothing is written.
	ErrInvalidDelay = errors.New("invalid delay")
	// ErrInvalidMaxAttempts is returned for max attempts below 1, on a job or
	// a queue (PM105). Nothing is written.
	ErrInvalidMaxAttempts = errors.New("invalid max attempts")
	// ErrJobNotHeld is returned by Complete, Fail, Snooze and ExtendJob when
	// the caller's claim no longer holds the job: it was completed, failed,
	// snoozed or cancelled, or its lease expired and it was rescued (and
	// perhaps claimed again) (PM106). Nothing is written.
	ErrJobNotHeld = errors.New("job not held")
	// ErrUnknownJob is returned when no job, live or archived, has the id
	// (PM107).
	ErrUnknownJob = errors.New("unknown job")
	// ErrQueueNotEmpty is returned by DeleteQueue when the queue still has
	// live jobs and force was not given (PM108).
	ErrQueueNotEmpty = errors.New("queue not empty")
	// ErrQueueFull is returned by enqueues that would put more live jobs
	// (waiting or running) in a queue than its MaxDepth (PM109). Enqueue
	// and EnqueueMany first retry for up to the queue's
	// BackpressureTimeout (default 5s); EnqueueTx and EnqueueManyTx fail at
	// once. Nothing of the batch was written. IsRetryable reports true.
	ErrQueueFull = errors.New("queue full")
)

func init() {
	registerCode("PM101", ErrUnknownQueue)
	registerCode("PM102", ErrQueueExists)
	registerCode("PM103", ErrPayloadTooLarge)
	registerCode("PM104", ErrInvalidDelay)
	registerCode("PM105", ErrInvalidMaxAttempts)
	registerCode("PM106", ErrJobNotHeld)
	registerCode("PM107", ErrUnknownJob)
	registerCode("PM108", ErrQueueNotEmpty)
	registerCode("PM109", ErrQueueFull)
}
