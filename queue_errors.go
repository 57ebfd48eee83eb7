package pgmsg

import "github.com/pgmsg/pgmsg/internal/errs"

// Queue sentinel errors. Like the log's, each matches with errors.Is, has a
// stable code (Error.Code) that the SQL API raises as its SQLSTATE, and keeps
// the *pgconn.PgError reachable with errors.As when the database raised it.
var (
	// ErrUnknownQueue is returned when a queue does not exist: by claims,
	// stats and dead-letter tools, and by enqueues with
	// EnqueueOpts.DisableCreateQueue (PM101).
	ErrUnknownQueue error = errs.UnknownQueue
	// ErrQueueExists is returned by CreateQueue when the name is taken (PM102).
	ErrQueueExists error = errs.QueueExists
	// ErrPayloadTooLarge is returned by Enqueue when a payload exceeds the
	// queue's MaxPayloadBytes (PM103). Nothing of the batch is written.
	ErrPayloadTooLarge error = errs.PayloadTooLarge
	// ErrInvalidDelay is returned for a negative delay, snooze or retry
	// delay (PM104). Nothing is written.
	ErrInvalidDelay error = errs.InvalidDelay
	// ErrInvalidMaxAttempts is returned for max attempts below 1, on a job or
	// a queue (PM105). Nothing is written.
	ErrInvalidMaxAttempts error = errs.InvalidMaxAttempts
	// ErrJobNotHeld is returned by Complete, Fail, Snooze and ExtendJob when
	// the caller's claim no longer holds the job: it was completed, failed,
	// snoozed or cancelled, or its lease expired and it was rescued (and
	// perhaps claimed again) (PM106). Nothing is written.
	ErrJobNotHeld error = errs.JobNotHeld
	// ErrUnknownJob is returned when no job, live or archived, has the id
	// (PM107).
	ErrUnknownJob error = errs.UnknownJob
	// ErrQueueNotEmpty is returned by DeleteQueue when the queue still has
	// live jobs and force was not given (PM108).
	ErrQueueNotEmpty error = errs.QueueNotEmpty
	// ErrQueueFull is returned by enqueues that would put more live jobs
	// (waiting or running) in a queue than its MaxDepth (PM109). Enqueue
	// and EnqueueMany first retry for up to the queue's
	// BackpressureTimeout (default 5s); EnqueueTx and EnqueueManyTx fail at
	// once. Nothing of the batch was written. IsRetryable reports true.
	ErrQueueFull error = errs.QueueFull
	// ErrJobNotWaiting is returned by RetryJob for a job that is running,
	// dead or finished: only a scheduled or retrying job can be made
	// claimable now (PM110).
	ErrJobNotWaiting error = errs.JobNotWaiting
	// ErrUnknownPeriodicJob is returned by RemovePeriodicJob when the queue
	// has no periodic job of that name (PM111).
	ErrUnknownPeriodicJob error = errs.UnknownPeriodicJob
	// ErrInvalidSchedule is returned for a periodic job's schedule or time
	// zone that cannot be read, or a schedule that never fires (PM112).
	ErrInvalidSchedule error = errs.InvalidSchedule
	// ErrLimitKeyMissing is returned by an enqueue into a queue with a
	// QueueConfig.KeyField of a job that has no limit key: no
	// EnqueueParams.LimitKey and no such field in its payload (or a payload
	// that is not JSON) (PM113).
	ErrLimitKeyMissing error = errs.LimitKeyMissing
	// ErrUnknownDependency is returned by an enqueue of a job that depends
	// on a job id no job has (live or archived), or on a name no job of
	// its batch has (EnqueueParams.DependsOn, DependsOnNames) (PM114).
	// Nothing of the batch is written.
	ErrUnknownDependency error = errs.UnknownDependency
	// ErrDependencyQueue is returned by an enqueue of a job that depends on
	// a job of another queue (PM115). Nothing of the batch is written.
	ErrDependencyQueue error = errs.DependencyQueue
	// ErrDependencyCycle is returned by an enqueue of a batch whose jobs
	// depend on one another in a cycle (a job on itself included) (PM116).
	// Nothing of the batch is written.
	ErrDependencyCycle error = errs.DependencyCycle
	// ErrTooManyDependencies is returned by an enqueue of a job with more
	// than JobDependsOnMax dependencies (PM117). Nothing of the batch is
	// written.
	ErrTooManyDependencies error = errs.TooManyDeps
	// ErrInvalidTenant is returned for a tenant name that is not 1 to
	// TenantMaxBytes of A-Z a-z 0-9 . _ : / = @ + - (PM118). Nothing of
	// the batch is written.
	ErrInvalidTenant error = errs.InvalidTenant
	// ErrInvalidTenantWeight is returned by SetTenantWeight for a weight
	// that is not from TenantWeightMin to TenantWeightMax (PM119).
	ErrInvalidTenantWeight error = errs.InvalidWeight
	// ErrInvalidStepName is returned by Step and StepJSON for a step name
	// that is not 1 to 200 of A-Z a-z 0-9 . _ - : / (PM122). Nothing is
	// written and the step does not run.
	ErrInvalidStepName error = errs.InvalidStepName
	// ErrStepTooLarge is returned by Step and StepJSON when a step's output
	// is more than StepOutputMaxBytes as JSON, or a job would record more
	// than JobStepsMax steps (PM123). The step ran; its checkpoint is not
	// written.
	ErrStepTooLarge error = errs.StepTooLarge
	// ErrInvalidBatchCallback is returned by EnqueueBatch for a callback
	// that is not a valid job spec: no kind, a bad queue name, a priority
	// out of range, metadata that is not an object (PM120). Nothing of the
	// batch is written.
	ErrInvalidBatchCallback error = errs.InvalidCallback
	// ErrUnknownBatch is returned by GetBatch when no batch has the id
	// (PM121).
	ErrUnknownBatch error = errs.UnknownBatch
	// ErrJobTimeout is the cause of a handler's context cancelled because
	// the job ran longer than WorkerOpts.JobTimeout; the attempt fails with
	// it (context.Cause(ctx) tells a handler why it was cancelled).
	ErrJobTimeout error = errs.JobTimeout
)
