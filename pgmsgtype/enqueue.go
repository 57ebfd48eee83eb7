package pgmsgtype

import (
	"encoding/json"
	"time"
)

// EnqueueParams is one job to enqueue.
type EnqueueParams struct {
	// Payload is the job's data, opaque to pgmsg (pgmsg.JSONPayload encodes JSON).
	// At most the queue's MaxPayloadBytes.
	Payload []byte
	// Kind is an optional type name for handlers to dispatch on.
	Kind string
	// Priority orders claims: higher first, -32768..32767. Default 0.
	Priority int
	// RunAt is when the job becomes claimable (client clock). Default now.
	// Give RunAt or Delay, not both.
	RunAt time.Time
	// Delay makes the job claimable this long after the enqueue, on the
	// database clock. Must not be negative. Default 0.
	Delay time.Duration
	// MaxAttempts overrides the queue's MaxAttempts for this job (>= 1).
	// Default 0: the queue's.
	MaxAttempts int
	// UniqueKey, if set, makes the job unique among the queue's live
	// (waiting or running) jobs: enqueueing another job with the same key
	// while one is live is a no-op that reports the existing job
	// (EnqueueResult.Duplicate).
	UniqueKey string
	// UniqueFor makes UniqueKey unique within a window of this length
	// instead, whatever became of the window's job (waiting, running,
	// completed, cancelled or dead): at most one "sync-user-42" job per
	// hour. Windows are fixed and aligned to the Unix epoch (an hour's
	// from the top of the hour, UTC); the job's UniqueKey is stored as
	// <key>@<window start>, so a live job of an earlier window does not
	// make it a duplicate. From 1 second to 366 days; needs UniqueKey.
	// Default 0: unique among live jobs only.
	UniqueFor time.Duration
	// Timeout is the longest a handler may run this job, overriding its
	// queue's JobTimeout (QueueConfig): a pgmsg.Worker cancels the handler's
	// context when it passes and fails the attempt with pgmsg.ErrJobTimeout.
	// At most 366 days. Default 0: the queue's.
	Timeout time.Duration
	// Tags label the job for search (pgmsg.ListJobsOpts.Tag): at most
	// pgmsg.JobTagsMax, each 1 to 100 of A-Z a-z 0-9 . _ : / = @ + - (duplicates
	// are stored once, sorted). Kept in the archive.
	Tags []string
	// Metadata is a JSON object the application keeps with the job (who
	// asked, a trace id, ...): at most pgmsg.JobDocumentMaxBytes. Shown by
	// pgmsg.Client.GetJob and pgmsg.Client.ListJobs and kept in the archive;
	// claims do not carry it.
	Metadata json.RawMessage
	// SequenceKey puts the job in a sequence of its queue: the queue's
	// jobs with the same key run one at a time, in enqueue order (by job
	// id), across every worker process. A job waits in state
	// JobStatePending until the one before it in its sequence completed.
	// When a job of a sequence fails for good (goes dead, retries
	// exhausted or discarded) or is cancelled, its sequence is held: the
	// jobs behind it keep waiting until pgmsg.Client.ResumeSequence (or a
	// requeue of the dead job, which then runs next). 1 to
	// pgmsg.SequenceKeyMaxBytes bytes. Default "": no sequence.
	SequenceKey string
	// SequenceContinue lets the job's failure (dead or cancelled) release
	// its sequence instead of holding it: the next job runs. Needs
	// SequenceKey.
	SequenceContinue bool
	// LimitKey is the job's key for its queue's per-key limit
	// (QueueConfig.KeyLimit): at most KeyLimit jobs of one key are admitted
	// at once; the others wait in state JobStatePending. It overrides the
	// queue's QueueConfig.KeyField. A queue without a KeyLimit refuses it
	// (pgmsg.ErrInvalidArgument), and so does a job with a SequenceKey.
	// 1 to pgmsg.LimitKeyMaxBytes bytes. Default "": the payload's
	// KeyField, or no limit.
	LimitKey string
	// DependsOn makes the job wait for other jobs of its queue, by id:
	// it stays in state JobStatePending until every one of them (and of
	// DependsOnNames) completed, and becomes claimable in the transaction
	// that completes the last. A dependency that is cancelled, deleted or
	// goes dead cancels the job instead (and, in turn, the jobs waiting on
	// it), unless IgnoreCancelledDeps / IgnoreDeadDeps. At most
	// pgmsg.JobDependsOnMax, counting DependsOnNames. An id of no job is
	// pgmsg.ErrUnknownDependency, a job of another queue
	// pgmsg.ErrDependencyQueue. A job with dependencies has no UniqueKey,
	// SequenceKey or LimitKey. Default nil: no dependencies.
	DependsOn []int64
	// Name names the job within its batch (pgmsg.Client.EnqueueMany,
	// pgmsg.Workflow), for other jobs of the batch to depend on it
	// (DependsOnNames). 1 to pgmsg.JobNameMaxBytes bytes, unique within
	// the batch; not stored.
	Name string
	// DependsOnNames are dependencies among the jobs of the same batch, by
	// their Name; a name of none is pgmsg.ErrUnknownDependency, and a
	// cycle pgmsg.ErrDependencyCycle.
	DependsOnNames []string
	// IgnoreCancelledDeps counts a dependency that was cancelled or
	// deleted as done instead of cancelling the job.
	IgnoreCancelledDeps bool
	// IgnoreDeadDeps counts a dependency that went dead (retries
	// exhausted, or discarded) as done instead of cancelling the job.
	IgnoreDeadDeps bool
	// Tenant names the job's tenant for fair share: the first job naming
	// a tenant makes its queue fair, and a fair queue serves its tenants
	// by weight (pgmsg.Client.SetTenantWeight, default 1) instead of in
	// enqueue order, so a tenant with a large backlog does not starve
	// one that enqueues a few jobs later. Within a priority a job's turn
	// is its virtual start tag: max(the queue's virtual time, the
	// tenant's previous finish tag), each job moving its tenant's tag on
	// by 1/weight; a higher priority still goes first. In a fair queue a
	// job without a Tenant is the default tenant "". 1 to
	// pgmsg.TenantMaxBytes of A-Z a-z 0-9 . _ : / = @ + -, else
	// pgmsg.ErrInvalidTenant. Default "": none.
	Tenant string
}

// EnqueueResult is what an enqueue did with one job.
type EnqueueResult struct {
	// ID of the job: the new job, or the existing one for a duplicate.
	ID int64 `json:"id"`
	// Duplicate reports that a live job with the same UniqueKey existed
	// (with UniqueFor: a job of the key's window, in any state); nothing
	// was inserted and ID, State and RunAt are that job's (a window's job
	// the archive no longer keeps reports State completed and no RunAt).
	Duplicate bool      `json:"duplicate"`
	State     JobState  `json:"state"`
	RunAt     time.Time `json:"run_at"`
}

// QueueStats counts a queue's jobs by state. Computing them reads the
// partial index of each state, so the cost follows the size of the states,
// not of the table; calling it every few seconds is fine.
type QueueStats struct {
	Queue string `json:"queue"`
	// Available jobs can be claimed now (run_at has passed).
	Available int64 `json:"available"`
	// Scheduled jobs wait for a future run_at (enqueued with a delay, or snoozed).
	Scheduled int64 `json:"scheduled"`
	// Running jobs are held by a worker.
	Running int64 `json:"running"`
	// Retrying jobs failed and wait for their retry.
	Retrying int64 `json:"retrying"`
	// Dead jobs ran out of attempts (dead-letter).
	Dead int64 `json:"dead"`
	// Pending jobs wait behind an earlier job of their sequence
	// (EnqueueParams.SequenceKey), for a place under their key's limit
	// (EnqueueParams.LimitKey) or for their dependencies
	// (EnqueueParams.DependsOn).
	Pending int64 `json:"pending"`
	// Archived jobs completed or were cancelled and are not yet pruned.
	Archived int64 `json:"archived"`
	// OldestAvailableAge is how long the oldest available job has waited
	// since its run_at (0 when none is available).
	OldestAvailableAge time.Duration `json:"oldest_available_age"`
	// ArchivedLastMinute counts jobs archived in the last minute.
	ArchivedLastMinute int64 `json:"archived_last_minute"`
	// Throughput is ArchivedLastMinute per second.
	Throughput float64 `json:"throughput"`
	// Paused queues take jobs but hand none out (pgmsg.Client.PauseQueue).
	Paused bool `json:"paused"`
}
