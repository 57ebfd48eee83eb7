package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func (s *Server) queueRoutes() []Route {
	return []Route{
		{Method: http.MethodPost, Pattern: "/v1/queue/enqueue", Scope: pgmsg.ScopeEnqueue, handler: s.enqueue},
		{Method: http.MethodGet, Pattern: "/v1/queue/claim", Scope: pgmsg.ScopeClaim, changesOnGet: true, handler: s.claimJobs},
		{Method: http.MethodPost, Pattern: "/v1/queue/ack", Scope: pgmsg.ScopeClaim, handler: s.ackJob},
		{Method: http.MethodPost, Pattern: "/v1/queue/fail", Scope: pgmsg.ScopeClaim, handler: s.failJob},
		{Method: http.MethodPost, Pattern: "/v1/queue/extend", Scope: pgmsg.ScopeClaim, handler: s.extendJob},
		{Method: http.MethodPost, Pattern: "/v1/queue/progress", Scope: pgmsg.ScopeClaim, handler: s.jobProgress},
		{Method: http.MethodGet, Pattern: "/v1/queues", Scope: pgmsg.ScopeAdmin, handler: s.listQueueStats},
		{Method: http.MethodPost, Pattern: "/v1/queues", Scope: pgmsg.ScopeAdmin, handler: s.createQueue},
		{Method: http.MethodGet, Pattern: "/v1/queues/{queue}", Scope: pgmsg.ScopeAdmin, handler: s.queueStats},
		{Method: http.MethodPatch, Pattern: "/v1/queues/{queue}", Scope: pgmsg.ScopeAdmin, handler: s.configureQueue},
		{Method: http.MethodGet, Pattern: "/v1/queues/{queue}/dead", Scope: pgmsg.ScopeAdmin, handler: s.listDead},
		{Method: http.MethodGet, Pattern: "/v1/queues/{queue}/jobs", Scope: pgmsg.ScopeAdmin, handler: s.listJobs},
		{Method: http.MethodPost, Pattern: "/v1/queues/{queue}/dead/requeue", Scope: pgmsg.ScopeAdmin, handler: s.requeueDead},
		{Method: http.MethodPost, Pattern: "/v1/queues/{queue}/dead/purge", Scope: pgmsg.ScopeAdmin, handler: s.purgeDead},
		{Method: http.MethodPost, Pattern: "/v1/jobs/{id}/retry", Scope: pgmsg.ScopeAdmin, handler: s.retryJob},
		{Method: http.MethodGet, Pattern: "/v1/jobs/{id}", Scope: pgmsg.ScopeAdmin, handler: s.getJob},
		{Method: http.MethodGet, Pattern: "/v1/jobs/{id}/workflow", Scope: pgmsg.ScopeAdmin, handler: s.getWorkflow},
		{Method: http.MethodGet, Pattern: "/v1/jobs/{id}/logs", Scope: pgmsg.ScopeAdmin, handler: s.getJobLogs},
		{Method: http.MethodPost, Pattern: "/v1/queues/{queue}/pause", Scope: pgmsg.ScopeAdmin, handler: s.pauseQueue},
		{Method: http.MethodPost, Pattern: "/v1/queues/{queue}/resume", Scope: pgmsg.ScopeAdmin, handler: s.resumeQueue},
		{Method: http.MethodGet, Pattern: "/v1/queues/{queue}/sequences", Scope: pgmsg.ScopeAdmin, handler: s.listSequences},
		{Method: http.MethodPost, Pattern: "/v1/queues/{queue}/sequences/{key}/resume", Scope: pgmsg.ScopeAdmin, handler: s.resumeSequence},
		{Method: http.MethodGet, Pattern: "/v1/queues/{queue}/limit-keys", Scope: pgmsg.ScopeAdmin, handler: s.listLimitKeys},
		{Method: http.MethodGet, Pattern: "/v1/queues/{queue}/tenants", Scope: pgmsg.ScopeAdmin, handler: s.listTenants},
		{Method: http.MethodPut, Pattern: "/v1/queues/{queue}/tenants/{tenant}", Scope: pgmsg.ScopeAdmin, handler: s.setTenantWeight},
		{Method: http.MethodGet, Pattern: "/v1/queues/{queue}/periodic", Scope: pgmsg.ScopeAdmin, handler: s.listPeriodic},
		{Method: http.MethodPut, Pattern: "/v1/queues/{queue}/periodic/{name}", Scope: pgmsg.ScopeAdmin, handler: s.putPeriodic},
		{Method: http.MethodDelete, Pattern: "/v1/queues/{queue}/periodic/{name}", Scope: pgmsg.ScopeAdmin, handler: s.deletePeriodic},
		// The original paths (kept for clients written against them).
		{Method: http.MethodPost, Pattern: "/queue/enqueue", Alias: "/v1/queue/enqueue", Scope: pgmsg.ScopeEnqueue, handler: s.enqueue},
		{Method: http.MethodGet, Pattern: "/queue/claim", Alias: "/v1/queue/claim", Scope: pgmsg.ScopeClaim, changesOnGet: true, handler: s.claimJobs},
	}
}

// EnqueueRequest is the body of POST /v1/queue/enqueue.
type EnqueueRequest struct {
	Queue string `json:"queue"`
	// Encoding of every payload: json (default), text or base64.
	Encoding string       `json:"encoding,omitempty"`
	Jobs     []EnqueueJob `json:"jobs"`
}

// EnqueueJob is one job to enqueue.
type EnqueueJob struct {
	Payload     json.RawMessage `json:"payload,omitempty"`
	Kind        string          `json:"kind,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	Delay       *Duration       `json:"delay,omitempty"`
	RunAt       *time.Time      `json:"run_at,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	UniqueKey   string          `json:"unique_key,omitempty"`
	// UniqueFor makes unique_key unique within a window of this length,
	// whatever became of the window's job.
	UniqueFor *Duration `json:"unique_for,omitempty"`
	// Timeout overrides the queue's job_timeout for this job.
	Timeout *Duration `json:"timeout,omitempty"`
	// Tags label the job for search (at most 20).
	Tags jobTags `json:"tags,omitempty"`
	// Metadata is a JSON object kept with the job (at most 64 KiB).
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// SequenceKey puts the job in a sequence (1 to 200 bytes; "" is
	// refused: omit the field for none).
	SequenceKey *string `json:"sequence_key,omitempty"`
	// SequenceContinue lets the job's failure move its sequence on.
	SequenceContinue bool `json:"sequence_continue,omitempty"`
	// LimitKey is the job's key for its queue's key_limit (1 to 200
	// bytes; "" is refused: omit the field for the payload's key_field,
	// or none).
	LimitKey *string `json:"limit_key,omitempty"`
	// Name names the job within the request, for other jobs of it to
	// depend on (1 to 200 bytes, unique within the request).
	Name string `json:"name,omitempty"`
	// DependsOn are the job's dependencies: ids of jobs of the queue
	// (numbers) and names of jobs of the request (strings), at most 1000.
	DependsOn []json.RawMessage `json:"depends_on,omitempty"`
	// IgnoreCancelledDeps and IgnoreDeadDeps count a cancelled (or
	// deleted) / dead dependency as done instead of cancelling the job.
	IgnoreCancelledDeps bool `json:"ignore_cancelled_deps,omitempty"`
	IgnoreDeadDeps      bool `json:"ignore_dead_deps,omitempty"`
	// Tenant names the job's tenant for fair share (1 to 200 of
	// A-Z a-z 0-9 . _ : / = @ + -; "" is refused: omit the field for none).
	Tenant *string `json:"tenant,omitempty"`
}

// jobTags are a job's tags, decoded up to the one past pgmsg.JobTagsMax,
// where decoding stops with the library's answer (400 invalid_argument):
// one job of a body costs no more than a job the server accepts.
type jobTags []string

// UnmarshalJSON decodes a JSON array of strings (or null).
func (t *jobTags) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		*t = nil
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return &json.UnmarshalTypeError{Value: "non-array", Type: reflect.TypeFor[[]string]()}
	}
	var out []string
	for dec.More() {
		if len(out) == pgmsg.JobTagsMax {
			return fmt.Errorf("%w: at most %d tags per job", pgmsg.ErrInvalidArgument, pgmsg.JobTagsMax)
		}
		var tag string
		if err := dec.Decode(&tag); err != nil {
			return err
		}
		out = append(out, tag)
	}
	*t = out
	return nil
}

func (s *Server) enqueue(w http.ResponseWriter, r *http.Request) error {
	var req EnqueueRequest
	err := s.decodeList(w, r, &listBody{
		nameField: "queue", name: &req.Queue,
		authorize: func(queue string) error { return authorize(r, pgmsg.ScopeEnqueue, queue) },
		listField: "jobs", max: s.cfg.MaxRecords,
		item: func(dec *json.Decoder, _ int) error {
			req.Jobs = append(req.Jobs, EnqueueJob{})
			return dec.Decode(&req.Jobs[len(req.Jobs)-1])
		},
		fields: map[string]any{"encoding": &req.Encoding},
	})
	if err != nil {
		return err
	}
	if req.Queue == "" {
		return newAPIError(errInvalidParameter, "field \"queue\" is required")
	}
	// Again: the queue may have come after the jobs.
	if err := authorize(r, pgmsg.ScopeEnqueue, req.Queue); err != nil {
		return err
	}
	// An empty batch is the library's to refuse (ErrEmptyBatch); one over
	// MaxRecords was refused while it was read.
	params, err := enqueueParams(&req)
	if err != nil {
		return err
	}
	res, err := s.client.EnqueueMany(r.Context(), req.Queue, params, nil)
	if err != nil {
		return err
	}
	s.metrics.enqueued.WithLabelValues(req.Queue).Add(float64(len(res)))
	return writeJSON(w, http.StatusOK, map[string]any{"queue": req.Queue, "jobs": res})
}

// enqueueParams converts req's jobs into the library's params.
func enqueueParams(req *EnqueueRequest) ([]pgmsg.EnqueueParams, error) {
	params := make([]pgmsg.EnqueueParams, len(req.Jobs))
	for i, j := range req.Jobs {
		req.Jobs[i] = EnqueueJob{} // the decoded copy is garbage once converted
		p, err := decodeValue(j.Payload, req.Encoding, fmt.Sprintf("jobs[%d].payload", i))
		if err != nil {
			return nil, err
		}
		params[i] = pgmsg.EnqueueParams{Payload: p, Kind: j.Kind, Priority: j.Priority, MaxAttempts: j.MaxAttempts, UniqueKey: j.UniqueKey,
			Tags: []string(j.Tags), Metadata: j.Metadata}
		if j.Delay != nil {
			params[i].Delay = time.Duration(*j.Delay)
		}
		if j.RunAt != nil {
			params[i].RunAt = *j.RunAt
		}
		if j.UniqueFor != nil {
			params[i].UniqueFor = time.Duration(*j.UniqueFor)
			if params[i].UniqueFor <= 0 {
				return nil, newAPIError(errInvalidParameter, "jobs[%d].unique_for must be positive", i)
			}
		}
		if j.SequenceKey != nil {
			if *j.SequenceKey == "" {
				return nil, newAPIError(errInvalidParameter, "jobs[%d].sequence_key must be 1 to %d bytes (omit it for none)", i, pgmsg.SequenceKeyMaxBytes)
			}
			params[i].SequenceKey = *j.SequenceKey
		}
		params[i].SequenceContinue = j.SequenceContinue
		if j.LimitKey != nil {
			if *j.LimitKey == "" {
				return nil, newAPIError(errInvalidParameter, "jobs[%d].limit_key must be 1 to %d bytes (omit it for none)", i, pgmsg.LimitKeyMaxBytes)
			}
			params[i].LimitKey = *j.LimitKey
		}
		if j.Tenant != nil {
			if *j.Tenant == "" {
				return nil, fmt.Errorf("%w: jobs[%d].tenant must be 1 to %d bytes (omit it for none)", pgmsg.ErrInvalidTenant, i, pgmsg.TenantMaxBytes)
			}
			params[i].Tenant = *j.Tenant
		}
		if len(j.DependsOn) > pgmsg.JobDependsOnMax {
			return nil, fmt.Errorf("%w: jobs[%d] has more than %d dependencies", pgmsg.ErrTooManyDependencies, i, pgmsg.JobDependsOnMax)
		}
		for k, d := range j.DependsOn {
			var id int64
			var name string
			if err := json.Unmarshal(d, &id); err == nil && id > 0 {
				params[i].DependsOn = append(params[i].DependsOn, id)
			} else if err := json.Unmarshal(d, &name); err == nil {
				params[i].DependsOnNames = append(params[i].DependsOnNames, name)
			} else {
				return nil, newAPIError(errInvalidParameter, "jobs[%d].depends_on[%d] must be a job id (a positive integer) or the name of a job of the request", i, k)
			}
		}
		params[i].Name, params[i].IgnoreCancelledDeps, params[i].IgnoreDeadDeps = j.Name, j.IgnoreCancelledDeps, j.IgnoreDeadDeps
		if j.Timeout != nil {
			params[i].Timeout = time.Duration(*j.Timeout)
			if params[i].Timeout <= 0 {
				return nil, newAPIError(errInvalidParameter, "jobs[%d].timeout must be positive", i)
			}
		}
	}
	return params, nil
}

func (s *Server) claimJobs(w http.ResponseWriter, r *http.Request) error {
	q := params{r.URL.Query()}
	queue, err := q.required("queue")
	if err != nil {
		return err
	}
	if err := validNames("queue", queue); err != nil {
		return err
	}
	if err := authorize(r, pgmsg.ScopeClaim, queue); err != nil {
		return err
	}
	opts := pgmsg.ClaimJobsOpts{Worker: q.Get("worker")}
	if err := checkWorker(opts.Worker); err != nil {
		return err
	}
	if opts.Max, err = q.int("max", 1); err != nil {
		return err
	}
	if opts.Max < 1 {
		return newAPIError(errInvalidParameter, "max must be at least 1, got %d", opts.Max)
	}
	if opts.Max > s.cfg.MaxRecords {
		return newAPIError(errLimitExceeded, "max %d is more than the server's limit of %d", opts.Max, s.cfg.MaxRecords)
	}
	if opts.MaxBytes, err = q.maxBytes(s.cfg.MaxAnswerBytes); err != nil {
		return err
	}
	if opts.Lease, err = q.duration("lease", 0); err != nil {
		return err
	}
	wait, err := q.duration("wait", 0)
	if err != nil {
		return err
	}
	if wait > s.cfg.MaxWait {
		return newAPIError(errLimitExceeded, "wait %s is longer than the server's limit of %s", wait, s.cfg.MaxWait)
	}
	enc, err := outputEncoding(q.Values)
	if err != nil {
		return err
	}
	jobs, err := s.claimJobsWaiting(r.Context(), queue, &opts, wait)
	if err != nil {
		return err
	}
	s.metrics.claimed.WithLabelValues(queue).Add(float64(len(jobs)))
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "jobs": wire.EncodeJobs(jobs, enc)})
}

// WorkerMaxBytes is the longest worker name a claim may give.
const WorkerMaxBytes = 200

// checkWorker returns 400 invalid_parameter unless worker (a claim's
// claimant, stored with each job it leases) is at most WorkerMaxBytes of
// UTF-8 text without control characters.
func checkWorker(worker string) error {
	if len(worker) > WorkerMaxBytes {
		return newAPIError(errInvalidParameter, "worker must be at most %d bytes, got %d", WorkerMaxBytes, len(worker))
	}
	if !utf8.ValidString(worker) || strings.IndexFunc(worker, unicode.IsControl) >= 0 {
		return newAPIError(errInvalidParameter, "worker must be text without control characters, got %q", truncateParam(worker))
	}
	return nil
}

// claimJobsWaiting claims, and when nothing is claimable and wait > 0,
// waits for an enqueue notification (polling every PollInterval as the
// fallback, which also picks up delayed and retried jobs as they become
// due) until wait passes, the client goes away or the server drains.
func (s *Server) claimJobsWaiting(ctx context.Context, queue string, opts *pgmsg.ClaimJobsOpts, wait time.Duration) ([]*pgmsg.Job, error) {
	var jobs []*pgmsg.Job
	err := s.longPoll(ctx, wait, func() (<-chan struct{}, func()) { return s.client.JobWakeups(queue) },
		func() (bool, error) {
			var err error
			jobs, err = s.client.ClaimJobs(ctx, queue, opts)
			return len(jobs) > 0, err
		})
	return jobs, err
}

// JobRequest identifies a claimed job in ack, fail and extend.
type JobRequest struct {
	// Queue of the job: the token's claim scope is checked against it.
	Queue      string `json:"queue"`
	ID         *int64 `json:"id"`
	LeaseToken *int64 `json:"lease_token"`
	// Error (fail only) is recorded in the job's error history.
	Error string `json:"error,omitempty"`
	// RetryIn (fail only) overrides the queue's backoff.
	RetryIn *Duration `json:"retry_in,omitempty"`
	// Dead (fail only) sends the job to dead-letter without retrying.
	Dead bool `json:"dead,omitempty"`
	// Lease (extend only): how long from now; default the queue's lease.
	Lease *Duration `json:"lease,omitempty"`
	// Result (ack only): the job's result, any JSON value of at most 64
	// KiB, archived with it; absent or null: none.
	Result json.RawMessage `json:"result,omitempty"`
	// Progress (progress only): any JSON value of at most 64 KiB, shown
	// by GET /v1/jobs/{id}; null clears it.
	Progress json.RawMessage `json:"progress,omitempty"`
}

func (s *Server) jobRequest(w http.ResponseWriter, r *http.Request) (*JobRequest, *pgmsg.Job, error) {
	var req JobRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return nil, nil, err
	}
	switch {
	case req.Queue == "":
		return nil, nil, newAPIError(errInvalidParameter, "field \"queue\" is required")
	case req.ID == nil:
		return nil, nil, newAPIError(errInvalidParameter, "field \"id\" is required")
	case req.LeaseToken == nil:
		return nil, nil, newAPIError(errInvalidParameter, "field \"lease_token\" is required")
	}
	if err := validNames("queue", req.Queue); err != nil {
		return nil, nil, err
	}
	if err := authorize(r, pgmsg.ScopeClaim, req.Queue); err != nil {
		return nil, nil, err
	}
	// A token limited to some queues may only finish their jobs. A job of
	// another queue is answered as one that does not exist (404
	// unknown_job, the same message), so that the token learns nothing of
	// the other queues' job ids.
	if tok, _ := r.Context().Value(tokenKey{}).(*pgmsg.Token); tok != nil && !tok.Allows(pgmsg.ScopeClaim, "*") {
		j, err := s.client.GetJob(r.Context(), *req.ID)
		if err != nil && !errors.Is(err, pgmsg.ErrUnknownJob) {
			return nil, nil, err
		}
		if err != nil || j.Queue != req.Queue {
			return nil, nil, newAPIError(pgmsg.ErrUnknownJob, "no job %d in queue %q", *req.ID, req.Queue)
		}
	}
	return &req, &pgmsg.Job{ID: *req.ID, Queue: req.Queue, LeaseToken: *req.LeaseToken}, nil
}

func (s *Server) ackJob(w http.ResponseWriter, r *http.Request) error {
	req, job, err := s.jobRequest(w, r)
	if err != nil {
		return err
	}
	if err := job.SetResult(req.Result); err != nil {
		return err
	}
	if err := s.client.Complete(r.Context(), job); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": job.ID, "state": pgmsg.JobStateCompleted})
}

// jobProgress records a held job's progress.
func (s *Server) jobProgress(w http.ResponseWriter, r *http.Request) error {
	req, job, err := s.jobRequest(w, r)
	if err != nil {
		return err
	}
	if req.Progress == nil {
		return newAPIError(errInvalidParameter, "field \"progress\" is required (null clears it)")
	}
	if err := s.client.SetJobProgress(r.Context(), job, req.Progress); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": job.ID, "progress": job.Progress})
}

func (s *Server) failJob(w http.ResponseWriter, r *http.Request) error {
	req, job, err := s.jobRequest(w, r)
	if err != nil {
		return err
	}
	opts := &pgmsg.FailOpts{Dead: req.Dead}
	if req.RetryIn != nil {
		opts.RetryIn = time.Duration(*req.RetryIn)
	}
	msg := req.Error
	if msg == "" {
		msg = "failed (no error given)"
	}
	res, err := s.client.Fail(r.Context(), job, errors.New(msg), opts)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": job.ID, "state": res.State, "run_at": res.RunAt})
}

func (s *Server) extendJob(w http.ResponseWriter, r *http.Request) error {
	req, job, err := s.jobRequest(w, r)
	if err != nil {
		return err
	}
	var lease time.Duration
	if req.Lease != nil {
		lease = time.Duration(*req.Lease)
	}
	if err := s.client.ExtendJob(r.Context(), job, lease); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": job.ID, "lease_expires_at": job.LeaseExpiresAt})
}

func (s *Server) listQueueStats(w http.ResponseWriter, r *http.Request) error {
	st, err := s.client.AllQueueStats(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queues": st})
}

func (s *Server) queueStats(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("queue", r.PathValue("queue")); err != nil {
		return err
	}
	st, err := s.client.QueueStats(r.Context(), r.PathValue("queue"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) listDead(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("queue", r.PathValue("queue")); err != nil {
		return err
	}
	q := params{r.URL.Query()}
	queue := r.PathValue("queue")
	if _, err := s.client.QueueStats(r.Context(), queue); err != nil {
		return err
	}
	limit, err := q.int("limit", 100)
	if err != nil {
		return err
	}
	if limit < 1 || limit > s.cfg.MaxRecords {
		return newAPIError(errLimitExceeded, "limit must be between 1 and %d, got %d", s.cfg.MaxRecords, limit)
	}
	after, err := q.int("after_id", 0)
	if err != nil {
		return err
	}
	enc, err := outputEncoding(q.Values)
	if err != nil {
		return err
	}
	jobs, err := s.client.ListDeadJobs(r.Context(), queue, &pgmsg.DeadJobsOpts{Kind: q.Get("kind"), Limit: limit, AfterID: int64(after)})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "jobs": wire.EncodeJobs(jobs, enc)})
}

// listJobs pages through a queue's jobs, live and archived, by id: oldest
// first, or newest first with order=desc (after_id then pages downwards).
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := validNames("queue", queue); err != nil {
		return err
	}
	q := params{r.URL.Query()}
	limit, err := q.int("limit", 100)
	if err != nil {
		return err
	}
	if limit < 1 || limit > min(s.cfg.MaxRecords, 1000) {
		return newAPIError(errLimitExceeded, "limit must be between 1 and %d, got %d", min(s.cfg.MaxRecords, 1000), limit)
	}
	after, err := q.int("after_id", 0)
	if err != nil {
		return err
	}
	if after < 0 {
		return newAPIError(errInvalidParameter, "after_id must not be negative, got %d", after)
	}
	order := pgmsg.JobOrder(q.Get("order"))
	if order != "" && order != pgmsg.JobOrderAsc && order != pgmsg.JobOrderDesc {
		return newAPIError(errInvalidParameter, "order must be asc or desc, got %q", order)
	}
	opts := &pgmsg.ListJobsOpts{State: pgmsg.JobState(q.Get("state")), Kind: q.Get("kind"), Tag: q.Get("tag"), Limit: limit,
		AfterID: int64(after), Order: order}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"since", &opts.Since}, {"until", &opts.Until}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		t, err := wire.ParseTime(f.name, v)
		if err != nil {
			return newAPIError(errInvalidParameter, "%v", err)
		}
		*f.to = t
	}
	enc, err := outputEncoding(q.Values)
	if err != nil {
		return err
	}
	jobs, err := s.client.ListJobs(r.Context(), queue, opts)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "jobs": wire.EncodeJobs(jobs, enc)})
}

// DeadJobsRequest selects dead jobs to requeue or purge: the ids given, or
// all (of kind) when none is.
type DeadJobsRequest struct {
	IDs  []int64 `json:"ids,omitempty"`
	Kind string  `json:"kind,omitempty"`
	// OlderThan (purge only): only jobs dead for longer.
	OlderThan *Duration `json:"older_than,omitempty"`
}

func (s *Server) deadRequest(w http.ResponseWriter, r *http.Request) (string, *pgmsg.DeadJobsOpts, error) {
	var req DeadJobsRequest
	if r.ContentLength != 0 {
		err := s.decodeList(w, r, &listBody{
			listField: "ids", max: s.cfg.MaxRecords,
			item: func(dec *json.Decoder, _ int) error {
				var id int64
				err := dec.Decode(&id)
				req.IDs = append(req.IDs, id)
				return err
			},
			fields: map[string]any{"kind": &req.Kind, "older_than": &req.OlderThan},
		})
		if err != nil {
			return "", nil, err
		}
	}
	queue := r.PathValue("queue")
	if err := validNames("queue", queue); err != nil {
		return "", nil, err
	}
	if _, err := s.client.QueueStats(r.Context(), queue); err != nil {
		return "", nil, err
	}
	opts := &pgmsg.DeadJobsOpts{IDs: req.IDs, Kind: req.Kind}
	if req.OlderThan != nil {
		opts.OlderThan = time.Duration(*req.OlderThan)
	}
	return queue, opts, nil
}

func (s *Server) requeueDead(w http.ResponseWriter, r *http.Request) error {
	queue, opts, err := s.deadRequest(w, r)
	if err != nil {
		return err
	}
	if opts.OlderThan != 0 {
		return newAPIError(errInvalidParameter, "field \"older_than\" is for purge, not requeue")
	}
	n, err := s.client.RequeueDeadJobs(r.Context(), queue, opts)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "requeued": n})
}

// retryJob makes a scheduled or retrying job claimable now.
func (s *Server) retryJob(w http.ResponseWriter, r *http.Request) error {
	id, err := jobIDParam(r)
	if err != nil {
		return err
	}
	if err := s.client.RetryJob(r.Context(), id); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": id, "state": pgmsg.JobStateAvailable})
}

// jobIDParam is the path's job id.
func jobIDParam(r *http.Request) (int64, error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return 0, newAPIError(errInvalidParameter, "job id must be a positive integer, got %q", truncateParam(raw))
	}
	return id, nil
}

// getJob answers one job, live or archived: its state, attempts, errors,
// timeout and payload (in the encoding asked for).
func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	id, err := jobIDParam(r)
	if err != nil {
		return err
	}
	enc, err := outputEncoding(r.URL.Query())
	if err != nil {
		return err
	}
	j, err := s.client.GetJob(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wire.EncodeJob(j, enc))
}

// getWorkflow answers the jobs of job {id}'s workflow with their states
// and dependencies (GET /v1/jobs/{id}/workflow?limit=).
func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request) error {
	id, err := jobIDParam(r)
	if err != nil {
		return err
	}
	limit, err := params{r.URL.Query()}.int("limit", 10000)
	if err != nil {
		return err
	}
	jobs, err := s.client.GetWorkflow(r.Context(), id, &pgmsg.GetWorkflowOpts{Limit: limit})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": id, "jobs": jobs})
}

// getJobLogs answers what job {id}'s handlers logged, per attempt, and
// the steps it recorded (GET /v1/jobs/{id}/logs).
func (s *Server) getJobLogs(w http.ResponseWriter, r *http.Request) error {
	id, err := jobIDParam(r)
	if err != nil {
		return err
	}
	logs, err := s.client.JobLogs(r.Context(), id)
	if err != nil {
		return err
	}
	steps, err := s.client.JobSteps(r.Context(), id)
	if err != nil {
		return err
	}
	if logs == nil {
		logs = []pgmsg.JobLog{}
	}
	if steps == nil {
		steps = []pgmsg.JobStep{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": id, "logs": logs, "steps": steps})
}

// pauseQueue stops a queue from handing out jobs (enqueues go on).
func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request) error {
	return s.setPaused(w, r, true)
}

// resumeQueue lets a paused queue hand out jobs again.
func (s *Server) resumeQueue(w http.ResponseWriter, r *http.Request) error {
	return s.setPaused(w, r, false)
}

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	queue := r.PathValue("queue")
	if err := validNames("queue", queue); err != nil {
		return err
	}
	set := s.client.ResumeQueue
	if paused {
		set = s.client.PauseQueue
	}
	if err := set(r.Context(), queue); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "paused": paused})
}

func (s *Server) purgeDead(w http.ResponseWriter, r *http.Request) error {
	queue, opts, err := s.deadRequest(w, r)
	if err != nil {
		return err
	}
	n, err := s.client.PurgeDeadJobs(r.Context(), queue, opts)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "purged": n})
}

// PeriodicJobRequest is the body of PUT /v1/queues/{queue}/periodic/{name}.
type PeriodicJobRequest struct {
	// Schedule: five cron fields, @hourly and the other descriptors, or
	// @every <interval> (pgmsg.PeriodicJob).
	Schedule string `json:"schedule"`
	// TimeZone of the cron fields, an IANA name; default UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Encoding of payload: json (default), text or base64.
	Encoding    string          `json:"encoding,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Kind        string          `json:"kind,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Timeout     *Duration       `json:"timeout,omitempty"`
	Tags        jobTags         `json:"tags,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	RunOnStart  bool            `json:"run_on_start,omitempty"`
}

// listPeriodic answers a queue's periodic jobs.
func (s *Server) listPeriodic(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := validNames("queue", queue); err != nil {
		return err
	}
	enc, err := outputEncoding(r.URL.Query())
	if err != nil {
		return err
	}
	list, err := s.client.ListPeriodicJobs(r.Context(), queue)
	if err != nil {
		return err
	}
	out := make([]wire.PeriodicJobJSON, len(list))
	for i, p := range list {
		out[i] = wire.EncodePeriodicJob(p, enc)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "periodic_jobs": out})
}

// periodicPath is the queue and periodic job a request's path names.
func periodicPath(r *http.Request) (queue, name string, err error) {
	queue, name = r.PathValue("queue"), r.PathValue("name")
	if err := validNames("queue", queue); err != nil {
		return "", "", err
	}
	return queue, name, pgmsg.ValidateName("periodic job", name)
}

// putPeriodic adds or replaces a periodic job.
func (s *Server) putPeriodic(w http.ResponseWriter, r *http.Request) error {
	queue, name, err := periodicPath(r)
	if err != nil {
		return err
	}
	var req PeriodicJobRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Schedule == "" {
		return newAPIError(errInvalidParameter, "field \"schedule\" is required")
	}
	payload, err := decodeValue(req.Payload, req.Encoding, "payload")
	if err != nil {
		return err
	}
	p := pgmsg.PeriodicJob{Queue: queue, Name: name, Schedule: req.Schedule, TimeZone: req.TimeZone, Payload: payload,
		Kind: req.Kind, Priority: req.Priority, MaxAttempts: req.MaxAttempts, Tags: []string(req.Tags), Metadata: req.Metadata,
		RunOnStart: req.RunOnStart}
	if req.Timeout != nil {
		if p.Timeout = time.Duration(*req.Timeout); p.Timeout <= 0 {
			return newAPIError(errInvalidParameter, "timeout must be positive")
		}
	}
	out, err := s.client.AddPeriodicJob(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wire.EncodePeriodicJob(out, wire.EncodingAuto))
}

// deletePeriodic removes a periodic job.
func (s *Server) deletePeriodic(w http.ResponseWriter, r *http.Request) error {
	queue, name, err := periodicPath(r)
	if err != nil {
		return err
	}
	if err := s.client.RemovePeriodicJob(r.Context(), queue, name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// queueList serves a queue's paged list (GET /v1/queues/{queue}/sequences,
// limit-keys, tenants): the queue from the path, limit (1 to 10000, 100 by
// default) and after (the last key of the previous page) from the query,
// then list's rows as {"queue": ..., field: [...]}, an empty array when
// there are none. list may read further parameters from q.
func queueList[T any](w http.ResponseWriter, r *http.Request, field string,
	list func(ctx context.Context, q params, queue string, limit int, after string) ([]T, error)) error {
	queue := r.PathValue("queue")
	if err := validNames("queue", queue); err != nil {
		return err
	}
	q := params{r.URL.Query()}
	limit, err := q.int("limit", 100)
	if err != nil {
		return err
	}
	if limit < 1 || limit > 10000 {
		return newAPIError(errLimitExceeded, "limit must be between 1 and 10000, got %d", limit)
	}
	rows, err := list(r.Context(), q, queue, limit, q.Get("after"))
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []T{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, field: rows})
}

func (s *Server) listSequences(w http.ResponseWriter, r *http.Request) error {
	return queueList(w, r, "sequences", func(ctx context.Context, q params, queue string, limit int, after string) ([]*pgmsg.Sequence, error) {
		held, err := q.bool("held")
		if err != nil {
			return nil, err
		}
		return s.client.ListSequences(ctx, queue, &pgmsg.ListSequencesOpts{HeldOnly: held, Limit: limit, AfterKey: after})
	})
}

func (s *Server) listLimitKeys(w http.ResponseWriter, r *http.Request) error {
	return queueList(w, r, "limit_keys", func(ctx context.Context, _ params, queue string, limit int, after string) ([]*pgmsg.LimitKey, error) {
		return s.client.ListLimitKeys(ctx, queue, &pgmsg.ListLimitKeysOpts{Limit: limit, AfterKey: after})
	})
}

func (s *Server) resumeSequence(w http.ResponseWriter, r *http.Request) error {
	queue, key := r.PathValue("queue"), r.PathValue("key")
	if err := validNames("queue", queue); err != nil {
		return err
	}
	resumed, err := s.client.ResumeSequence(r.Context(), queue, key)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "sequence_key": key, "resumed": resumed})
}

func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) error {
	return queueList(w, r, "tenants", func(ctx context.Context, _ params, queue string, limit int, after string) ([]*pgmsg.Tenant, error) {
		return s.client.ListTenants(ctx, queue, &pgmsg.ListTenantsOpts{Limit: limit, AfterTenant: after})
	})
}

// TenantWeightRequest is the body of PUT /v1/queues/{queue}/tenants/{tenant}.
type TenantWeightRequest struct {
	Weight *float64 `json:"weight"`
}

func (s *Server) setTenantWeight(w http.ResponseWriter, r *http.Request) error {
	queue, tenant := r.PathValue("queue"), r.PathValue("tenant")
	if err := validNames("queue", queue); err != nil {
		return err
	}
	var req TenantWeightRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Weight == nil {
		return newAPIError(errInvalidParameter, "field \"weight\" is required")
	}
	if err := s.client.SetTenantWeight(r.Context(), queue, tenant, *req.Weight); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "tenant": tenant, "weight": *req.Weight})
}
