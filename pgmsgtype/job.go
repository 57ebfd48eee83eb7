package pgmsgtype

import (
	"encoding/json"
	"time"

	"github.com/pgmsg/pgmsg/internal/jobdoc"
)

// JobState is where a job is in its life.
type JobState string

// Job states. Available, scheduled and retrying jobs wait (and are claimable
// once their RunAt passes); running jobs are held by a worker; dead jobs ran
// out of attempts. Pending jobs wait behind an earlier job of their sequence
// (EnqueueParams.SequenceKey), for a place under their key's limit
// (EnqueueParams.LimitKey) or for their dependencies
// (EnqueueParams.DependsOn), and are not claimable. Completed and cancelled
// jobs are in the archive.
const (
	JobStateAvailable JobState = "available"
	JobStateScheduled JobState = "scheduled"
	JobStateRetrying  JobState = "retrying"
	JobStateRunning   JobState = "running"
	JobStateDead      JobState = "dead"
	JobStatePending   JobState = "pending"
	JobStateCompleted JobState = "completed"
	JobStateCancelled JobState = "cancelled"
)

// JobOrder is the order pgmsg.Client.ListJobs lists jobs in, by id.
type JobOrder string

// Job list orders: oldest first (by ascending id, the default) or newest
// first (by descending id).
const (
	JobOrderAsc  JobOrder = "asc"
	JobOrderDesc JobOrder = "desc"
)

// Job is a job as claimed by a worker or read by pgmsg.Client.GetJob.
type Job struct {
	ID    int64    `json:"id"`
	Queue string   `json:"queue"`
	State JobState `json:"state"`
	// Kind is the job's optional type name, for routing in handlers.
	Kind    string `json:"kind,omitempty"`
	Payload []byte `json:"payload"`
	// Priority: higher runs first.
	Priority int `json:"priority"`
	// Attempt counts the claims of the job that were not snoozed, this one
	// included (1 on the first run).
	Attempt     int `json:"attempt"`
	MaxAttempts int `json:"max_attempts"`
	// LeaseToken identifies the claim that holds a running job: pgmsg.Client.Complete,
	// pgmsg.Client.Fail, pgmsg.Client.Snooze and pgmsg.Client.ExtendJob present it, and fail with pgmsg.ErrJobNotHeld
	// once another claim took over.
	LeaseToken     int64      `json:"lease_token,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	RunAt          *time.Time `json:"run_at,omitempty"`
	EnqueuedAt     time.Time  `json:"enqueued_at"`
	AttemptedAt    *time.Time `json:"attempted_at,omitempty"`
	// FinishedAt is when the job was archived or went dead.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Worker     string     `json:"worker,omitempty"`
	UniqueKey  string     `json:"unique_key,omitempty"`
	// Errors is the error history, oldest first.
	Errors []JobError `json:"errors,omitempty"`
	// Timeout is the longest a handler may run the job: its own
	// (pgmsg.EnqueueParams.Timeout) or its queue's JobTimeout; 0: none. Set on
	// claimed and live jobs.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Progress is what the job's handler last recorded with
	// Client.SetJobProgress (JSON), as pgmsg.Client.GetJob sees it: while the job runs,
	// and kept when it finishes.
	Progress json.RawMessage `json:"progress,omitempty"`
	// Tags and Metadata are the job's own (pgmsg.EnqueueParams), as pgmsg.Client.GetJob and
	// pgmsg.Client.ListJobs see them; claims do not carry them.
	Tags     []string        `json:"tags,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Result is the job's result (JSON): set it in the handler with
	// SetResult and it is archived with the job when the job is completed
	// (by the pgmsg.Worker when the handler returns nil, or by pgmsg.Client.Complete); pgmsg.Client.GetJob
	// returns a completed job's result.
	Result json.RawMessage `json:"result,omitempty"`
	// DependsOn are the jobs the job was enqueued to wait for
	// (pgmsg.EnqueueParams.DependsOn and DependsOnNames), and DepsWaiting
	// how many of them it still waits for while pending; WorkflowID is
	// the workflow it belongs to (pgmsg.Client.GetWorkflow), 0 for none.
	// Set by pgmsg.Client.GetJob and pgmsg.Client.ListJobs (DependsOn and
	// WorkflowID by pgmsg.Client.ListDeadJobs too); claims do not carry
	// them.
	DependsOn   []int64 `json:"depends_on,omitempty"`
	DepsWaiting int     `json:"deps_waiting,omitempty"`
	WorkflowID  int64   `json:"workflow_id,omitempty"`
	// SequenceKey and LimitKey are the job's sequence key
	// (pgmsg.EnqueueParams.SequenceKey) and per-key limit key
	// (pgmsg.EnqueueParams.LimitKey, or the one taken from its payload's
	// field), "" for none, as pgmsg.Client.GetJob and pgmsg.Client.ListJobs see them;
	// claims do not carry them. The archive keeps the sequence key but not
	// the limit key: a completed or cancelled job has none.
	SequenceKey string `json:"sequence_key,omitempty"`
	LimitKey    string `json:"limit_key,omitempty"`
	// BatchID is the batch the job was enqueued in
	// (pgmsg.Client.EnqueueBatch; pgmsg.Client.GetBatch), 0 for none, as
	// pgmsg.Client.GetJob and pgmsg.Client.ListJobs see it; claims do not
	// carry it. The archive keeps it (jobs archived before migration 028
	// have none).
	BatchID int64 `json:"batch_id,omitempty"`
}

// SetResult encodes v as JSON (a json.RawMessage is taken as it is) and
// makes it the job's Result, archived with the job when it is completed.
// nil clears it. It fails with pgmsg.ErrInvalidArgument for what cannot be
// stored: invalid JSON, a NUL character (\u0000, which PostgreSQL's jsonb
// refuses), or more than pgmsg.JobDocumentMaxBytes.
func (j *Job) SetResult(v any) error {
	b, err := jobdoc.Encode("result", v)
	if err != nil {
		return err
	}
	j.Result = b
	return nil
}

// UnmarshalPayload decodes a JSON payload into v.
func (j *Job) UnmarshalPayload(v any) error {
	return json.Unmarshal(j.Payload, v)
}

// JobError is one failed attempt of a job.
type JobError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// JobLog is what a job's handler logged during one attempt (Client.JobLogs).
type JobLog struct {
	// Attempt is the attempt's number. A snoozed attempt is not counted:
	// the run after it has the same number.
	Attempt int `json:"attempt"`
	// At is when the attempt's outcome was recorded.
	At time.Time `json:"at"`
	// Outcome is what became of the attempt: completed, retrying, dead or
	// snoozed.
	Outcome string `json:"outcome"`
	// Log is the text logged, a line per record, cut at the worker's
	// WorkerOpts.MaxLogBytes with a last line that says so.
	Log string `json:"log"`
}

// JobStep is a step checkpoint a job's handler recorded (pgmsg.Step).
type JobStep struct {
	Name string `json:"name"`
	// Attempt is the attempt that completed the step, At when.
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	// Output is the step's output as JSON (null: none).
	Output json.RawMessage `json:"output,omitempty"`
}
