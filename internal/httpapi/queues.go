package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/pgmsg/pgmsg"
)

// QueueSettings are a queue's settings over HTTP: the body of POST
// /v1/queues (with name) and PATCH /v1/queues/{queue}, and the answer of
// both. Durations are strings such as "30s" or numbers of seconds. In a
// request, an absent field keeps its value (or the default, on create); in
// a PATCH, max_depth 0 removes the limit, backpressure_timeout 0 makes
// enqueues to a full queue fail at once, job_timeout 0 removes the queue's
// job timeout, dead_retention 0 keeps dead jobs again, rate_limit 0,
// max_running 0 and key_limit 0 remove those limits (key_limit 0 removes
// key_field too; key_field "" removes it alone).
type QueueSettings struct {
	Name                string    `json:"name,omitempty"`
	MaxAttempts         *int      `json:"max_attempts,omitempty"`
	Lease               *Duration `json:"lease,omitempty"`
	RetryBackoff        *Duration `json:"retry_backoff,omitempty"`
	RetryBackoffMax     *Duration `json:"retry_backoff_max,omitempty"`
	ArchiveRetention    *Duration `json:"archive_retention,omitempty"`
	MaxPayloadBytes     *int      `json:"max_payload_bytes,omitempty"`
	MaxDepth            *int64    `json:"max_depth,omitempty"`
	BackpressureTimeout *Duration `json:"backpressure_timeout,omitempty"`
	JobTimeout          *Duration `json:"job_timeout,omitempty"`
	DeadRetention       *Duration `json:"dead_retention,omitempty"`
	// RateLimit: most jobs handed out per second (0: none).
	RateLimit *float64 `json:"rate_limit,omitempty"`
	// MaxRunning: most jobs running at once across every worker (0: none).
	MaxRunning *int `json:"max_running,omitempty"`
	// KeyLimit: most jobs of one limit key admitted at once (0: none);
	// KeyField: the JSON payload field that is a job's limit key when it
	// gives none ("": none, keys given at enqueue only).
	KeyLimit  *int      `json:"key_limit,omitempty"`
	KeyField  *string   `json:"key_field,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// check refuses negative limits, which the library would read as its
// "remove" sentinels (QueueMaxDepthNone, QueueRateLimitNone,
// QueueMaxRunningNone).
func (q QueueSettings) check() error {
	switch {
	case q.MaxDepth != nil && *q.MaxDepth < 0:
		return fmt.Errorf("%w: max_depth must not be negative (0: no limit), got %d", pgmsg.ErrInvalidArgument, *q.MaxDepth)
	case q.RateLimit != nil && *q.RateLimit < 0:
		return fmt.Errorf("%w: rate_limit must not be negative (0: none), got %v", pgmsg.ErrInvalidArgument, *q.RateLimit)
	case q.MaxRunning != nil && *q.MaxRunning < 0:
		return fmt.Errorf("%w: max_running must not be negative (0: none), got %d", pgmsg.ErrInvalidArgument, *q.MaxRunning)
	case q.KeyLimit != nil && *q.KeyLimit < 0:
		return fmt.Errorf("%w: key_limit must not be negative (0: none), got %d", pgmsg.ErrInvalidArgument, *q.KeyLimit)
	}
	return nil
}

// config turns a request into the library's QueueConfig, whose zero
// values mean "default" (create) or "unchanged" (update).
func (q QueueSettings) config(update bool) pgmsg.QueueConfig {
	var c pgmsg.QueueConfig
	dur := func(d *Duration) time.Duration {
		if d == nil {
			return 0
		}
		return time.Duration(*d)
	}
	if q.MaxAttempts != nil {
		c.MaxAttempts = *q.MaxAttempts
	}
	if q.MaxPayloadBytes != nil {
		c.MaxPayloadBytes = *q.MaxPayloadBytes
	}
	c.Lease, c.RetryBackoff, c.RetryBackoffMax = dur(q.Lease), dur(q.RetryBackoff), dur(q.RetryBackoffMax)
	c.ArchiveRetention = dur(q.ArchiveRetention)
	if q.MaxDepth != nil {
		c.MaxDepth = *q.MaxDepth
		if c.MaxDepth == 0 && update {
			c.MaxDepth = pgmsg.QueueMaxDepthNone
		}
	}
	if q.BackpressureTimeout != nil {
		c.BackpressureTimeout = time.Duration(*q.BackpressureTimeout)
		if c.BackpressureTimeout == 0 {
			c.BackpressureTimeout = pgmsg.QueueBackpressureNoWait
		}
	}
	if q.JobTimeout != nil {
		c.JobTimeout = time.Duration(*q.JobTimeout)
		if c.JobTimeout == 0 && update {
			c.JobTimeout = pgmsg.QueueJobTimeoutNone
		}
	}
	if q.DeadRetention != nil {
		c.DeadRetention = time.Duration(*q.DeadRetention)
		if c.DeadRetention == 0 && update {
			c.DeadRetention = pgmsg.QueueDeadRetentionNone
		}
	}
	if q.RateLimit != nil {
		c.RateLimit = *q.RateLimit
		if c.RateLimit == 0 && update {
			c.RateLimit = pgmsg.QueueRateLimitNone
		}
	}
	if q.MaxRunning != nil {
		c.MaxRunning = *q.MaxRunning
		if c.MaxRunning == 0 && update {
			c.MaxRunning = pgmsg.QueueMaxRunningNone
		}
	}
	if q.KeyLimit != nil {
		c.KeyLimit = *q.KeyLimit
		if c.KeyLimit == 0 && update {
			c.KeyLimit = pgmsg.QueueKeyLimitNone
		}
	}
	if q.KeyField != nil {
		c.KeyField = *q.KeyField
		if c.KeyField == "" && update {
			c.KeyField = pgmsg.QueueKeyFieldNone
		}
	}
	return c
}

// queueSettings is the answer for q: every setting filled in; max_depth 0
// means no limit, backpressure_timeout "0s" refusing at once, job_timeout
// "0s" none and dead_retention "0s" kept until acted on.
func queueSettings(q *pgmsg.Queue) QueueSettings {
	d := func(v time.Duration) *Duration { x := Duration(v); return &x }
	depth := max(q.MaxDepth, 0)
	maxAttempts, maxPayload, rate, running, keyLimit, keyField := q.MaxAttempts, q.MaxPayloadBytes, q.RateLimit, q.MaxRunning, q.KeyLimit, q.KeyField
	return QueueSettings{Name: q.Name, MaxAttempts: &maxAttempts, Lease: d(q.Lease), RetryBackoff: d(q.RetryBackoff),
		RetryBackoffMax: d(q.RetryBackoffMax), ArchiveRetention: d(q.ArchiveRetention), MaxPayloadBytes: &maxPayload,
		MaxDepth: &depth, BackpressureTimeout: d(max(q.BackpressureTimeout, 0)), JobTimeout: d(q.JobTimeout),
		DeadRetention: d(q.DeadRetention), RateLimit: &rate, MaxRunning: &running, KeyLimit: &keyLimit, KeyField: &keyField,
		CreatedAt: q.CreatedAt}
}

func (s *Server) createQueue(w http.ResponseWriter, r *http.Request) error {
	var req QueueSettings
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return newAPIError(errInvalidParameter, "field \"name\" is required")
	}
	if err := req.check(); err != nil {
		return err
	}
	q, err := s.client.CreateQueue(r.Context(), req.Name, req.config(false))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, queueSettings(q))
}

func (s *Server) configureQueue(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("queue", r.PathValue("queue")); err != nil {
		return err
	}
	var req QueueSettings
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Name != "" && req.Name != r.PathValue("queue") {
		return newAPIError(errInvalidParameter, "field \"name\" cannot rename a queue")
	}
	if err := req.check(); err != nil {
		return err
	}
	cfg := req.config(true)
	if cfg == (pgmsg.QueueConfig{}) {
		return newAPIError(errInvalidParameter, "give at least one setting to change")
	}
	q, err := s.client.UpdateQueue(r.Context(), r.PathValue("queue"), cfg)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, queueSettings(q))
}
