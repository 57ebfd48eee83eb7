package pgmsg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
)

// JobState is where a job is in its life.
type JobState string

// Job states. Available, scheduled and retrying jobs wait (and are claimable
// once their RunAt passes); running jobs are held by a worker; dead jobs ran
// out of attempts. Completed and cancelled jobs are in the archive.
const (
	JobStateAvailable JobState = "available"
	JobStateScheduled JobState = "scheduled"
	JobStateRetrying  JobState = "retrying"
	JobStateRunning   JobState = "running"
	JobStateDead      JobState = "dead"
	JobStateCompleted JobState = "completed"
	JobStateCancelled JobState = "cancelled"
)

// JobClaimMaxDefault is how many jobs ClaimJobs claims by default.
const JobClaimMaxDefault = 1

// Job is a job as claimed by a worker or read by GetJob.
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
	// LeaseToken identifies the claim that holds a running job: Complete,
	// Fail, Snooze and ExtendJob present it, and fail with ErrJobNotHeld
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
	// (EnqueueParams.Timeout) or its queue's JobTimeout; 0: none. Set on
	// claimed and live jobs.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Progress is what the job's handler last recorded with
	// Client.SetJobProgress (JSON), as GetJob sees it: while the job runs,
	// and kept when it finishes.
	Progress json.RawMessage `json:"progress,omitempty"`
	// Tags and Metadata are the job's own (EnqueueParams), as GetJob and
	// ListJobs see them; claims do not carry them.
	Tags     []string        `json:"tags,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Result is the job's result (JSON): set it in the handler with
	// SetResult and it is archived with the job when the job is completed
	// (by the Worker when the handler returns nil, or by Complete); GetJob
	// returns a completed job's result.
	Result json.RawMessage `json:"result,omitempty"`
	// trace is the trace context the job carries in its metadata, read
	// by a Worker when tracing is on (job_tracing.go).
	trace propagation.MapCarrier
}

// JobDocumentMaxBytes is the largest progress or result document a job
// keeps: 64 KiB of JSON text, as PostgreSQL writes it (jsonb's text form).
const JobDocumentMaxBytes = 64 << 10

// SetResult encodes v as JSON (a json.RawMessage is taken as it is) and
// makes it the job's Result, archived with the job when it is completed.
// nil clears it. It fails with ErrInvalidArgument for what cannot be
// stored: invalid JSON, a NUL character (\u0000, which PostgreSQL's jsonb
// refuses), or more than JobDocumentMaxBytes.
func (j *Job) SetResult(v any) error {
	b, err := jobDocument("result", v)
	if err != nil {
		return err
	}
	j.Result = b
	return nil
}

// jobDocument encodes a job's progress or result and checks it as
// job_progress and job_complete_many do (_job_document_check), as far as
// the client can: the limit applies to jsonb's text form, which adds a
// space after each ':' and ',' of compact JSON, so a document near the
// limit may pass here and still be refused by the server (PM004).
func jobDocument(what string, v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, newError(ErrInvalidArgument, "job %s: %v", what, err)
		}
	}
	if b == nil || string(bytes.TrimSpace(b)) == "null" {
		return nil, nil // none (JSON null too: SQL NULL, not a jsonb null)
	}
	switch {
	case !json.Valid(b):
		return nil, newError(ErrInvalidArgument, "job %s is not valid JSON", what)
	case hasJSONNul(b):
		return nil, newError(ErrInvalidArgument, "job %s contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot store", what)
	case len(b) > JobDocumentMaxBytes:
		return nil, newError(ErrInvalidArgument, "job %s is %d bytes, more than %d", what, len(b), JobDocumentMaxBytes)
	}
	return b, nil
}

// hasJSONNul reports whether the JSON text b has the escape \u0000 (a
// backslash that is not itself escaped, then u0000).
func hasJSONNul(b []byte) bool {
	for i := 0; ; {
		k := bytes.Index(b[i:], []byte(`u0000`))
		if k < 0 {
			return false
		}
		k += i
		n := 0 // backslashes right before the u
		for j := k - 1; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 1 {
			return true
		}
		i = k + 1
	}
}

// SetJobProgress records progress (encoded as JSON; nil clears it) for a
// job the caller holds, visible to GetJob while it runs and kept when it
// finishes. It fails with ErrJobNotHeld when the job's lease was lost, and
// ErrInvalidArgument for what SetResult refuses.
func (c *Client) SetJobProgress(ctx context.Context, job *Job, progress any) error {
	b, err := jobDocument("progress", progress)
	if err != nil {
		return err
	}
	if err := c.queries.JobProgress(ctx, c.db(c.pool), dbsqlc.JobProgressParams{ID: job.ID, LeaseToken: job.LeaseToken,
		Progress: b}); err != nil {
		return mapError(err)
	}
	job.Progress = b
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

func jobTime(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}

func jobErrors(raw []byte) ([]JobError, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var out []JobError
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("pgmsg: decode job errors: %w", err)
	}
	return out, nil
}

func jobFromGetRow(r *dbsqlc.JobGetRow) (*Job, error) {
	errs, err := jobErrors(r.Errors)
	if err != nil {
		return nil, err
	}
	return &Job{
		ID: r.ID, Queue: r.Queue, State: JobState(r.State), Kind: r.Kind, Payload: r.Payload,
		Priority: int(r.Priority), Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts),
		LeaseToken: r.LeaseToken, LeaseExpiresAt: jobTime(r.LeaseExpiresAt), RunAt: jobTime(r.RunAt),
		EnqueuedAt: r.EnqueuedAt.Time, AttemptedAt: jobTime(r.AttemptedAt), FinishedAt: jobTime(r.FinishedAt),
		Worker: r.Worker, UniqueKey: r.UniqueKey, Errors: errs, Timeout: time.Duration(r.TimeoutUs) * time.Microsecond,
		Progress: r.Progress, Result: r.Result, Tags: r.Tags, Metadata: r.Metadata,
	}, nil
}

// EnqueueParams is one job to enqueue.
type EnqueueParams struct {
	// Payload is the job's data, opaque to pgmsg (JSONPayload encodes JSON).
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
	// queue's JobTimeout (QueueConfig): a Worker cancels the handler's
	// context when it passes and fails the attempt with ErrJobTimeout.
	// At most 366 days. Default 0: the queue's.
	Timeout time.Duration
	// Tags label the job for search (ListJobsOpts.Tag): at most
	// JobTagsMax, each 1 to 100 of A-Z a-z 0-9 . _ : / = @ + - (duplicates
	// are stored once, sorted). Kept in the archive.
	Tags []string
	// Metadata is a JSON object the application keeps with the job (who
	// asked, a trace id, ...): at most JobDocumentMaxBytes. Shown by GetJob
	// and ListJobs and kept in the archive; claims do not carry it.
	Metadata json.RawMessage
}

// JobTagsMax is the most tags a job may have.
const JobTagsMax = 20

var jobTagRE = regexp.MustCompile(`^[A-Za-z0-9._:/=@+-]{1,100}$`)

// jobTagsJSON checks a job's tags as _job_tags() does and encodes them for
// enqueue_many() (nil: none).
func jobTagsJSON(i int, tags []string) ([]byte, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	if len(tags) > JobTagsMax {
		return nil, newError(ErrInvalidArgument, "job %d: at most %d tags, got %d", i, JobTagsMax, len(tags))
	}
	for _, t := range tags {
		if !jobTagRE.MatchString(t) {
			return nil, newError(ErrInvalidArgument, "job %d: tag %q: a tag is 1 to 100 of A-Z a-z 0-9 . _ : / = @ + -", i, t)
		}
	}
	return json.Marshal(tags)
}

// JSONPayload encodes v as JSON for EnqueueParams.Payload.
func JSONPayload(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, newError(ErrInvalidArgument, "payload is not JSON: %v", err)
	}
	return b, nil
}

// EnqueueOpts are options of an enqueue call; nil means defaults.
type EnqueueOpts struct {
	// DisableCreateQueue makes an enqueue to a queue that does not exist
	// fail with ErrUnknownQueue. Default false: the queue is created with
	// default settings.
	DisableCreateQueue bool
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

// Enqueue adds one job to queue. See EnqueueMany.
func (c *Client) Enqueue(ctx context.Context, queue string, params EnqueueParams, opts *EnqueueOpts) (*EnqueueResult, error) {
	res, err := c.EnqueueMany(ctx, queue, []EnqueueParams{params}, opts)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// EnqueueTx is Enqueue on exec: inside a transaction the job exists iff the
// transaction commits. See EnqueueManyTx.
func (c *Client) EnqueueTx(ctx context.Context, exec DBTX, queue string, params EnqueueParams, opts *EnqueueOpts) (*EnqueueResult, error) {
	res, err := c.EnqueueManyTx(ctx, exec, queue, []EnqueueParams{params}, opts)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// EnqueueMany adds jobs to queue in one statement, as EnqueueManyTx does on
// the client's pool, except that when the queue is full (ErrQueueFull) it
// retries for up to the queue's BackpressureTimeout (default 5s) for
// workers to make room.
func (c *Client) EnqueueMany(ctx context.Context, queue string, params []EnqueueParams, opts *EnqueueOpts) ([]*EnqueueResult, error) {
	var res []*EnqueueResult
	enqueue := func() (err error) {
		res, err = c.EnqueueManyTx(ctx, c.pool, queue, params, opts)
		return err
	}
	err := enqueue()
	if errors.Is(err, ErrQueueFull) {
		// Only a refused enqueue reads the queue's timeout.
		us, qerr := c.queries.QueueBackpressureTimeout(ctx, c.db(c.pool), queue)
		if qerr == nil {
			err = retryWhile(ctx, ErrQueueFull, time.Duration(us)*time.Microsecond, err, enqueue)
		}
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// EnqueueManyTx adds jobs to queue in one statement on exec and returns one
// result per job, in order. Bad input fails the whole batch and writes
// nothing: ErrEmptyBatch, ErrUnknownQueue (with DisableCreateQueue),
// ErrPayloadTooLarge, ErrInvalidDelay, ErrInvalidMaxAttempts,
// ErrInvalidArgument (priority out of range, RunAt and Delay both set).
// A queue with a MaxDepth that the batch would exceed fails it at once with
// ErrQueueFull: waiting inside the caller's transaction would hold its
// locks, so it is the caller's to retry (IsRetryable reports true).
// Idle workers of the queue are woken when the transaction commits.
func (c *Client) EnqueueManyTx(ctx context.Context, exec DBTX, queue string, params []EnqueueParams, opts *EnqueueOpts) (res []*EnqueueResult, err error) {
	if err := ValidateName("queue", queue); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, newError(ErrEmptyBatch, "empty batch: enqueue needs at least one job")
	}
	params, endSpan := c.startEnqueueSpan(ctx, queue, params)
	defer func() { endSpan(err) }()
	n := len(params)
	arg := dbsqlc.JobEnqueueManyParams{
		Queue: queue, Payloads: make([][]byte, n), Kinds: make([]string, n), Priorities: make([]int32, n),
		RunAts: make([]pgtype.Timestamptz, n), Delays: make([]pgtype.Interval, n), MaxAttempts: make([]int32, n),
		UniqueKeys: make([]string, n), CreateQueue: opts == nil || !opts.DisableCreateQueue,
	}
	var timeouts, uniqueFors []pgtype.Interval
	var tags, metadata [][]byte
	for i, p := range params {
		switch {
		case p.Delay < 0:
			return nil, newError(ErrInvalidDelay, "job %d: delay must not be negative, got %s", i, p.Delay)
		case p.MaxAttempts < 0:
			return nil, newError(ErrInvalidMaxAttempts, "job %d: max attempts must be at least 1, got %d", i, p.MaxAttempts)
		case p.Priority < JobPriorityMin || p.Priority > JobPriorityMax:
			return nil, newError(ErrInvalidArgument, "job %d: priority must be between %d and %d, got %d", i, JobPriorityMin, JobPriorityMax, p.Priority)
		case !p.RunAt.IsZero() && p.Delay != 0:
			return nil, newError(ErrInvalidArgument, "job %d: give RunAt or Delay, not both", i)
		case len(p.Kind) > JobKindMaxBytes:
			return nil, newError(ErrInvalidArgument, "job %d: kind must be at most %d bytes, got %d", i, JobKindMaxBytes, len(p.Kind))
		case len(p.UniqueKey) > JobUniqueKeyMaxBytes:
			return nil, newError(ErrInvalidArgument, "job %d: unique key must be at most %d bytes, got %d", i, JobUniqueKeyMaxBytes, len(p.UniqueKey))
		case p.UniqueFor != 0 && (p.UniqueKey == "" || p.UniqueFor < time.Second || p.UniqueFor > durationMax):
			return nil, newError(ErrInvalidArgument, "job %d: a uniqueness window needs a unique key and lasts from 1s to %s, got %s", i, durationMax, p.UniqueFor)
		case p.Timeout < 0 || (p.Timeout > 0 && p.Timeout < time.Microsecond) || p.Timeout > durationMax:
			return nil, newError(ErrInvalidArgument, "job %d: timeout must be from 1µs to %s (0: the queue's), got %s", i, durationMax, p.Timeout)
		}
		if !p.RunAt.IsZero() {
			if err := checkTime(fmt.Sprintf("job %d: run at", i), p.RunAt); err != nil {
				return nil, err
			}
		}
		arg.Payloads[i] = p.Payload
		if arg.Payloads[i] == nil {
			arg.Payloads[i] = []byte{}
		}
		arg.Kinds[i] = p.Kind
		arg.Priorities[i] = int32(p.Priority)
		if !p.RunAt.IsZero() {
			arg.RunAts[i] = pgtype.Timestamptz{Time: p.RunAt, Valid: true}
		}
		if p.Delay > 0 {
			arg.Delays[i] = jobInterval(p.Delay)
		}
		arg.MaxAttempts[i] = int32(min(p.MaxAttempts, 1<<30))
		arg.UniqueKeys[i] = p.UniqueKey
		if p.UniqueFor > 0 {
			if uniqueFors == nil {
				uniqueFors = make([]pgtype.Interval, n)
			}
			uniqueFors[i] = jobInterval(p.UniqueFor)
		}
		if p.Timeout > 0 {
			if timeouts == nil {
				timeouts = make([]pgtype.Interval, n)
			}
			timeouts[i] = jobInterval(p.Timeout)
		}
		t, err := jobTagsJSON(i, p.Tags)
		if err != nil {
			return nil, err
		}
		if t != nil {
			if tags == nil {
				tags = make([][]byte, n)
			}
			tags[i] = t
		}
		md, err := jobDocument(fmt.Sprintf("%d metadata", i), p.Metadata)
		if err != nil {
			return nil, err
		}
		if md != nil {
			if !bytes.HasPrefix(bytes.TrimSpace(md), []byte("{")) {
				return nil, newError(ErrInvalidArgument, "job %d: metadata must be a JSON object", i)
			}
			if metadata == nil {
				metadata = make([][]byte, n)
			}
			metadata[i] = md
		}
	}
	arg.Timeouts, arg.Tags, arg.Metadata, arg.UniqueFors = timeouts, tags, metadata, uniqueFors
	// The direct statement covers jobs without unique keys, tags or
	// metadata; enqueue_many() the rest.
	if !hasUniqueKeys(arg.UniqueKeys) && tags == nil && metadata == nil {
		out, err := c.enqueueDirect(ctx, exec, arg)
		if err != nil {
			return nil, mapError(err)
		}
		if out != nil {
			return out, nil
		}
	}
	rows, err := c.queries.JobEnqueueMany(ctx, c.db(exec), arg)
	if err != nil {
		return nil, mapError(err)
	}
	if len(rows) != n {
		return nil, fmt.Errorf("pgmsg: enqueue returned %d results for %d jobs", len(rows), n)
	}
	out := make([]*EnqueueResult, n)
	for i, r := range rows {
		out[i] = &EnqueueResult{ID: r.ID, Duplicate: r.Duplicate, State: JobState(r.State), RunAt: r.RunAt.Time}
	}
	return out, nil
}

func hasUniqueKeys(keys []string) bool {
	for _, k := range keys {
		if k != "" {
			return true
		}
	}
	return false
}

// enqueueDirectSQL inserts a batch of jobs without unique keys in one
// statement against the tables, as enqueue_many() does on its common path,
// from the connection's cached generic plan instead of a PL/pgSQL call
// (issue 13; the Go client's enqueue took twice as long as the same call
// from psql). It inserts nothing and returns no row when enqueue_many()
// has more to do or to say: an unknown queue (created, or PM101), a queue
// with a max_depth, or a payload over max_payload_bytes (PM103). The Go
// client checks every other argument before (EnqueueManyTx). Idle workers
// are woken in the transaction, as by enqueue_many().
//
// $1 queue, $2 payloads, $3 kinds (empty for none), $4 priorities, $5 run_ats,
// $6 delays, $7 max attempts (0 for the queue's), $8 the notify channel,
// $9 timeouts (NULL, or NULL entries, for none of the job's own).
// The last column only makes the wake CTE run (a CTE without writes runs
// only if referenced).
const enqueueDirectSQL = `WITH q AS (
    SELECT qq.queue_id, qq.max_attempts, qq.name FROM pgmsg.queue qq
     WHERE qq.name = $1::text AND qq.max_depth IS NULL
       AND NOT EXISTS (SELECT 1 FROM unnest($2::bytea[]) AS u(p) WHERE octet_length(u.p) > qq.max_payload_bytes)
), n AS (SELECT clock_timestamp() AS ts),
src AS (
    SELECT nextval('pgmsg.job_id_seq') AS id, u.*
      FROM q CROSS JOIN unnest($2::bytea[], $3::text[], $4::integer[], $5::timestamptz[], $6::interval[], $7::integer[],
                               $9::interval[])
           WITH ORDINALITY AS u(p, kd, pr, ra, d, m, tmo, ord)
), pl AS (
    INSERT INTO pgmsg.job_payload (id, payload) SELECT src.id, src.p FROM src
), ins AS (
    INSERT INTO pgmsg.job AS j (id, queue_id, state, priority, max_attempts, run_at, enqueued_at, kind, timeout)
    SELECT src.id, q.queue_id, CASE WHEN t.at > n.ts THEN 'scheduled' ELSE 'available' END,
           coalesce(src.pr, 0), coalesce(nullif(src.m, 0), q.max_attempts), t.at, n.ts, nullif(src.kd, ''), src.tmo
      FROM src CROSS JOIN q CROSS JOIN n
     CROSS JOIN LATERAL (SELECT coalesce(src.ra, n.ts + coalesce(src.d, interval '0')) AS at) t
     ORDER BY src.ord
    RETURNING j.id, j.state, j.run_at
), wake AS (
    SELECT pg_notify($8::text, 'queue:' || q.name) FROM q WHERE EXISTS (SELECT 1 FROM ins WHERE ins.state = 'available')
)
SELECT ins.id, ins.state, ins.run_at, (SELECT count(*) FROM wake) FROM ins ORDER BY ins.id`

// enqueueDirect runs enqueueDirectSQL; nil, nil means enqueue_many() must.
func (c *Client) enqueueDirect(ctx context.Context, exec DBTX, arg dbsqlc.JobEnqueueManyParams) ([]*EnqueueResult, error) {
	rows, err := c.db(exec).Query(ctx, enqueueDirectSQL, arg.Queue, arg.Payloads, arg.Kinds, arg.Priorities,
		arg.RunAts, arg.Delays, arg.MaxAttempts, c.config.Schema+"_log", arg.Timeouts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]*EnqueueResult, 0, len(arg.Payloads))
	for rows.Next() {
		var (
			r     EnqueueResult
			state string
			runAt pgtype.Timestamptz
			woke  int64
		)
		if err := rows.Scan(&r.ID, &state, &runAt, &woke); err != nil {
			return nil, err
		}
		r.State, r.RunAt = JobState(state), runAt.Time
		out = append(out, &r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	if len(out) != len(arg.Payloads) {
		return nil, fmt.Errorf("pgmsg: enqueue returned %d results for %d jobs", len(out), len(arg.Payloads))
	}
	return out, nil
}

// ClaimJobsOpts are options of ClaimJobs; nil means defaults.
type ClaimJobsOpts struct {
	// Max is the most jobs to claim. Default 1.
	Max int
	// Lease overrides the queue's Lease for these jobs.
	Lease time.Duration
	// Worker names the claimant (shown by GetJob). Optional.
	Worker string
	// MaxBytes caps the payload bytes of the claim: it stops before the job
	// that would take the total beyond MaxBytes, but always hands out at
	// least one job, whatever its size. Jobs beyond the cap are not leased.
	// Default 0: no cap.
	MaxBytes int64
}

// ClaimJobs leases up to opts.Max claimable jobs of queue to the caller in
// one statement, highest priority first, then oldest RunAt. Each job is
// running under a new LeaseToken until its lease expires; finish it with
// Complete, Fail or Snooze, and ExtendJob it if it runs long. Claimers never
// wait on one another. It returns no jobs (and no error) when none is
// claimable, and fails with ErrUnknownQueue.
func (c *Client) ClaimJobs(ctx context.Context, queue string, opts *ClaimJobsOpts) ([]*Job, error) {
	return c.claimJobs(ctx, c.pool, queue, opts, true)
}

// ClaimJobsTx is ClaimJobs on exec. Inside a transaction the claim is only
// visible once it commits; other claimers skip the jobs meanwhile.
func (c *Client) ClaimJobsTx(ctx context.Context, exec DBTX, queue string, opts *ClaimJobsOpts) ([]*Job, error) {
	return c.claimJobs(ctx, exec, queue, opts, false)
}

// claimJobs claims on exec. async (only for a claim that is its own
// transaction) lets the claim commit without waiting for its WAL flush:
// a claim lost in a crash is claimed again, which at-least-once allows.
func (c *Client) claimJobs(ctx context.Context, exec DBTX, queue string, opts *ClaimJobsOpts, async bool) ([]*Job, error) {
	o := ClaimJobsOpts{}
	if opts != nil {
		o = *opts
	}
	if o.Max == 0 {
		o.Max = JobClaimMaxDefault
	}
	if o.Max < 0 || o.Lease < 0 || o.MaxBytes < 0 {
		return nil, newError(ErrInvalidArgument, "max must be at least 1, and lease and max bytes must not be negative")
	}
	// The direct statement covers claims on the client's pool without a
	// byte cap (the worker's), and leases job_claim() accepts; job_claim()
	// answers the rest.
	direct := exec == DBTX(c.pool) && o.MaxBytes == 0 && o.Lease <= durationMax
	now := time.Now()
	if direct {
		jobs, ok, err := c.claimJobsDirect(ctx, queue, &o, async)
		if err != nil {
			return nil, mapError(err)
		}
		if ok {
			return jobs, nil
		}
	}
	params := dbsqlc.JobClaimParams{
		Queue: queue, MaxJobs: int32(min(o.Max, 1<<30)), Lease: jobOptInterval(o.Lease), Worker: jobOptText(o.Worker),
		Async: async,
	}
	if o.MaxBytes > 0 {
		params.MaxBytes = pgtype.Int8{Int64: o.MaxBytes, Valid: true}
	}
	rows, err := c.queries.JobClaim(ctx, c.db(exec), params)
	if err != nil {
		return nil, mapError(err)
	}
	out := make([]*Job, len(rows))
	for i, r := range rows {
		if out[i], err = jobFromClaimRow(r, o.Worker); err != nil {
			return nil, err
		}
	}
	if direct {
		st := c.jobClaimState(queue, true)
		st.claimed(out, true, now)
		if len(out) < o.Max {
			c.checkLimited(ctx, queue, st, now)
		}
	}
	return out, nil
}

// jobQueueLimitedSQL says whether a queue has a rate limit or running cap.
const jobQueueLimitedSQL = `SELECT qq.rate_limit IS NOT NULL OR qq.max_running IS NOT NULL FROM pgmsg.queue qq WHERE qq.name = $1`

// checkLimited learns, at most once per jobClaimLimitedFor, whether a
// queue whose job_claim() call returned fewer jobs than asked is limited:
// the direct statement says so itself, but a queue's first claims go
// through job_claim(), and a Worker needs to know (it claims again when a
// handler frees a slot of a limited queue; see fetch).
func (c *Client) checkLimited(ctx context.Context, queue string, st *jobClaimState, now time.Time) {
	st.mu.Lock()
	fresh := now.Sub(st.limitChecked) < jobClaimLimitedFor || now.Sub(st.limited) < jobClaimLimitedFor
	if !fresh {
		st.limitChecked = now
	}
	st.mu.Unlock()
	if fresh {
		return
	}
	var limited bool
	if err := c.pool.QueryRow(ctx, c.schemaSQL(jobQueueLimitedSQL), queue).Scan(&limited); err != nil || !limited {
		return
	}
	st.mu.Lock()
	st.limited = now
	st.mu.Unlock()
}

// jobFromClaimRow is a claimed job, as job_claim() returns it.
func jobFromClaimRow(r *dbsqlc.JobClaimRow, worker string) (*Job, error) {
	errs, err := jobErrors(r.Errors)
	if err != nil {
		return nil, err
	}
	return &Job{
		ID: r.ID, Queue: r.Queue, State: JobStateRunning, Kind: r.Kind, Payload: r.Payload,
		Priority: int(r.Priority), Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts),
		LeaseToken: r.LeaseToken, LeaseExpiresAt: jobTime(r.LeaseExpiresAt), RunAt: jobTime(r.RunAt),
		EnqueuedAt: r.EnqueuedAt.Time, AttemptedAt: jobTime(r.AttemptedAt), Worker: worker,
		UniqueKey: r.UniqueKey, Errors: errs, Timeout: time.Duration(r.TimeoutUs) * time.Microsecond,
	}, nil
}

// Complete archives a job the caller holds (status completed). It fails
// with ErrJobNotHeld, writing nothing, when the claim no longer holds the
// job (for example its lease expired and the job was rescued), and with
// ErrUnknownJob.
func (c *Client) Complete(ctx context.Context, job *Job) error {
	return c.CompleteTx(ctx, c.pool, job)
}

// CompleteTx is Complete on exec: complete the job in the same transaction
// as the handler's own writes, so both commit or neither does.
func (c *Client) CompleteTx(ctx context.Context, exec DBTX, job *Job) error {
	if _, err := jobDocument("result", job.Result); err != nil {
		return err
	}
	return mapError(c.queries.JobComplete(ctx, c.db(exec), dbsqlc.JobCompleteParams{ID: job.ID, LeaseToken: job.LeaseToken,
		Result: job.Result}))
}

// CompleteManyResult says which jobs of a CompleteMany were archived.
type CompleteManyResult struct {
	// Completed holds the ids of the jobs archived.
	Completed []int64
	// NotHeld holds the ids of the jobs the caller no longer held; they were
	// left as they are.
	NotHeld []int64
}

// CompleteMany archives many held jobs in one statement. Jobs no longer
// held are left as they are and reported in NotHeld.
func (c *Client) CompleteMany(ctx context.Context, jobs []*Job) (*CompleteManyResult, error) {
	return c.CompleteManyTx(ctx, c.pool, jobs)
}

// CompleteManyTx is CompleteMany on exec.
func (c *Client) CompleteManyTx(ctx context.Context, exec DBTX, jobs []*Job) (*CompleteManyResult, error) {
	return c.completeMany(ctx, exec, jobs)
}

// completeMany archives jobs with their results: with the direct statement
// when none has one, else with job_complete_many(), which checks them.
func (c *Client) completeMany(ctx context.Context, exec DBTX, jobs []*Job) (*CompleteManyResult, error) {
	res := &CompleteManyResult{}
	if len(jobs) == 0 {
		return res, nil
	}
	ids, tokens := make([]int64, len(jobs)), make([]int64, len(jobs))
	var results [][]byte
	for i, j := range jobs {
		ids[i], tokens[i] = j.ID, j.LeaseToken
		if j.Result != nil {
			if _, err := jobDocument("result", j.Result); err != nil {
				return nil, fmt.Errorf("job %d: %w", j.ID, err)
			}
			if results == nil {
				results = make([][]byte, len(jobs))
			}
			results[i] = j.Result
		}
	}
	var (
		done []int64
		err  error
	)
	if results == nil {
		done, err = c.queries.JobCompleteMany(ctx, c.db(exec), dbsqlc.JobCompleteManyParams{Ids: ids, LeaseTokens: tokens})
	} else {
		done, err = c.queries.JobCompleteManyResults(ctx, c.db(exec), dbsqlc.JobCompleteManyResultsParams{Ids: ids,
			LeaseTokens: tokens, Results: results})
	}
	if err != nil {
		return nil, mapError(err)
	}
	res.Completed = done
	if len(done) < len(ids) {
		slices.Sort(done)
		for _, id := range ids {
			if _, ok := slices.BinarySearch(done, id); !ok {
				res.NotHeld = append(res.NotHeld, id)
			}
		}
	}
	return res, nil
}

// FailOpts are options of Fail; nil means defaults.
type FailOpts struct {
	// RetryIn overrides the queue's backoff for this retry. Default 0: the
	// queue's backoff.
	RetryIn time.Duration
	// Dead sends the job to the dead-letter state at once, without retrying
	// (for errors that no retry will fix).
	Dead bool
}

// FailResult is a failed job's new state: JobStateRetrying with the RunAt of
// the retry, or JobStateDead.
type FailResult struct {
	State JobState
	RunAt time.Time
}

// Fail records jobErr as the error of the held attempt and schedules a
// retry after the queue's backoff (retry n waits RetryBackoff * 2^(n-1),
// capped, +-10% jitter), or moves the job to the dead-letter state when it
// is out of attempts. It fails with ErrJobNotHeld or ErrInvalidDelay,
// writing nothing.
func (c *Client) Fail(ctx context.Context, job *Job, jobErr error, opts *FailOpts) (*FailResult, error) {
	return c.FailTx(ctx, c.pool, job, jobErr, opts)
}

// FailTx is Fail on exec.
func (c *Client) FailTx(ctx context.Context, exec DBTX, job *Job, jobErr error, opts *FailOpts) (*FailResult, error) {
	o := FailOpts{}
	if opts != nil {
		o = *opts
	}
	if o.RetryIn < 0 {
		return nil, newError(ErrInvalidDelay, "retry delay must not be negative, got %s", o.RetryIn)
	}
	msg := "unknown error"
	if jobErr != nil {
		msg = jobErr.Error()
	}
	arg := dbsqlc.JobFailParams{ID: job.ID, LeaseToken: job.LeaseToken, Error: msg, Dead: o.Dead}
	if o.RetryIn > 0 {
		arg.RetryIn = jobInterval(o.RetryIn)
	}
	row, err := c.queries.JobFail(ctx, c.db(exec), arg)
	if err != nil {
		return nil, mapError(err)
	}
	return &FailResult{State: JobState(row.State), RunAt: row.RunAt.Time}, nil
}

// Snooze puts a held job back to wait delay (0: claimable at once, which
// releases it) without counting the attempt, and returns its new RunAt. It
// fails with ErrJobNotHeld or ErrInvalidDelay.
func (c *Client) Snooze(ctx context.Context, job *Job, delay time.Duration) (time.Time, error) {
	return c.SnoozeTx(ctx, c.pool, job, delay)
}

// SnoozeTx is Snooze on exec.
func (c *Client) SnoozeTx(ctx context.Context, exec DBTX, job *Job, delay time.Duration) (time.Time, error) {
	if delay < 0 {
		return time.Time{}, newError(ErrInvalidDelay, "snooze delay must not be negative, got %s", delay)
	}
	at, err := c.queries.JobSnooze(ctx, c.db(exec), dbsqlc.JobSnoozeParams{ID: job.ID, LeaseToken: job.LeaseToken, Delay: jobInterval(delay)})
	if err != nil {
		return time.Time{}, mapError(err)
	}
	return at.Time, nil
}

// ExtendJob pushes a held job's lease to lease from now (database clock;
// 0: the queue's Lease), a heartbeat for long jobs. It fails with
// ErrJobNotHeld.
func (c *Client) ExtendJob(ctx context.Context, job *Job, lease time.Duration) error {
	return c.ExtendJobTx(ctx, c.pool, job, lease)
}

// ExtendJobTx is ExtendJob on exec.
func (c *Client) ExtendJobTx(ctx context.Context, exec DBTX, job *Job, lease time.Duration) error {
	if lease < 0 {
		return newError(ErrInvalidArgument, "lease must not be negative, got %s", lease)
	}
	exp, err := c.queries.JobExtend(ctx, c.db(exec), dbsqlc.JobExtendParams{ID: job.ID, LeaseToken: job.LeaseToken, Lease: jobOptInterval(lease)})
	if err != nil {
		return mapError(err)
	}
	job.LeaseExpiresAt = jobTime(exp)
	return nil
}

// CancelJob archives a job (status cancelled) whatever its state; a worker
// running it then gets ErrJobNotHeld when it finishes. It returns false if
// the job had already finished, and fails with ErrUnknownJob.
func (c *Client) CancelJob(ctx context.Context, id int64) (bool, error) {
	return c.CancelJobTx(ctx, c.pool, id)
}

// CancelJobTx is CancelJob on exec.
func (c *Client) CancelJobTx(ctx context.Context, exec DBTX, id int64) (bool, error) {
	ok, err := c.queries.JobCancel(ctx, c.db(exec), id)
	return ok, mapError(err)
}

// RetryJob makes a scheduled or retrying job claimable now, keeping its
// attempts, and wakes its queue's idle workers; an available job is left as
// it is. It fails with ErrJobNotWaiting for a running, dead
// (RequeueDeadJobs requeues those) or finished job, and with ErrUnknownJob.
func (c *Client) RetryJob(ctx context.Context, id int64) error {
	return c.RetryJobTx(ctx, c.pool, id)
}

// RetryJobTx is RetryJob on exec; the workers are woken when it commits.
func (c *Client) RetryJobTx(ctx context.Context, exec DBTX, id int64) error {
	_, err := c.queries.JobRetry(ctx, c.db(exec), id)
	return mapError(err)
}

// GetJob returns a job wherever it is: live or archived. It fails with
// ErrUnknownJob.
func (c *Client) GetJob(ctx context.Context, id int64) (*Job, error) {
	row, err := c.queries.JobGet(ctx, c.db(c.pool), id)
	if err != nil {
		return nil, mapError(err)
	}
	return jobFromGetRow(row)
}
