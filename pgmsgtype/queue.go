package pgmsgtype

import "time"

// QueueConfig is a queue's settings. Zero fields take their defaults (on
// pgmsg.Client.CreateQueue) or stay unchanged (on pgmsg.Client.UpdateQueue).
type QueueConfig struct {
	// MaxAttempts a job gets unless it sets its own; after the last failed
	// attempt the job is dead. Default 25.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Lease is the visibility timeout: how long a claim holds a job before it
	// may be rescued, unless extended. Measured on the database clock.
	// Default 30s.
	Lease time.Duration `json:"lease,omitempty"`
	// RetryBackoff is the wait before the first retry; retry n waits
	// RetryBackoff * 2^(n-1), at most RetryBackoffMax, with +-10% jitter.
	// Default 1s.
	RetryBackoff time.Duration `json:"retry_backoff,omitempty"`
	// RetryBackoffMax caps the retry wait. Default 1h.
	RetryBackoffMax time.Duration `json:"retry_backoff_max,omitempty"`
	// ArchiveRetention is how long completed and cancelled jobs stay in the
	// archive before pgmsg.Client.PruneArchive deletes them. Default 7 days.
	ArchiveRetention time.Duration `json:"archive_retention,omitempty"`
	// MaxPayloadBytes is the largest payload pgmsg.Client.Enqueue accepts. Default 1 MiB.
	MaxPayloadBytes int `json:"max_payload_bytes,omitempty"`
	// MaxDepth is the most live jobs (waiting or running; dead jobs do not
	// count) the queue holds: an enqueue that would exceed it fails with
	// pgmsg.ErrQueueFull, after waiting up to BackpressureTimeout for room
	// (pgmsg.Client.Enqueue, pgmsg.Client.EnqueueMany) or at once (pgmsg.Client.EnqueueTx, pgmsg.Client.EnqueueManyTx).
	// Default 0: no limit. On pgmsg.Client.UpdateQueue, pgmsg.QueueMaxDepthNone removes the
	// limit. Queues with a limit pay a count bounded by it per enqueue
	// (docs/operations.md).
	MaxDepth int64 `json:"max_depth,omitempty"`
	// BackpressureTimeout is how long pgmsg.Client.Enqueue and pgmsg.Client.EnqueueMany wait for a
	// full queue to drain below MaxDepth before failing with pgmsg.ErrQueueFull.
	// Default 5s; pgmsg.QueueBackpressureNoWait refuses at once.
	BackpressureTimeout time.Duration `json:"backpressure_timeout,omitempty"`
	// JobTimeout is the longest a handler may run one of the queue's jobs
	// (a job's own pgmsg.EnqueueParams.Timeout takes precedence): a pgmsg.Worker
	// cancels the handler's context when it passes and fails the attempt
	// with pgmsg.ErrJobTimeout. At most 366 days. Default 0: none (the worker's
	// pgmsg.WorkerOpts.JobTimeout, if any). On pgmsg.Client.UpdateQueue, pgmsg.QueueJobTimeoutNone
	// removes it.
	JobTimeout time.Duration `json:"job_timeout,omitempty"`
	// DeadRetention is how long the queue keeps a dead job (for
	// pgmsg.Client.DeadJobs, pgmsg.Client.RequeueDeadJobs, pgmsg.Client.PurgeDeadJobs) before maintenance
	// deletes it (pgmsg.Client.PruneDeadJobs, task queue.dead_prune). At most 36525
	// days. Default 0: kept until acted on. On pgmsg.Client.UpdateQueue,
	// pgmsg.QueueDeadRetentionNone keeps them again.
	DeadRetention time.Duration `json:"dead_retention,omitempty"`
	// RateLimit is the most jobs the queue hands out per second, on
	// average, to all its workers together, in bursts of up to one
	// second's worth (at least one job): a token bucket kept in the
	// queue's row. Up to 1,000,000. Default 0: none. On pgmsg.Client.UpdateQueue,
	// pgmsg.QueueRateLimitNone removes it.
	RateLimit float64 `json:"rate_limit,omitempty"`
	// MaxRunning is the most of the queue's jobs running at once, across
	// every worker process (a global concurrency cap; each pgmsg.Worker's
	// Concurrency still bounds its own). Default 0: none. On pgmsg.Client.UpdateQueue,
	// pgmsg.QueueMaxRunningNone removes it.
	//
	// Claims of a queue with a RateLimit or a MaxRunning take turns on the
	// queue's row for their transaction (so the limits are never
	// overshot), and go through job_claim(). A pgmsg.Worker held back by a limit
	// claims again as soon as one of its own jobs of the queue finishes
	// (handler returned, completion committed), else at its poll interval.
	MaxRunning int `json:"max_running,omitempty"`
	// KeyLimit is the most of the queue's jobs of one limit key
	// (EnqueueParams.LimitKey, else the KeyField of the job's payload)
	// admitted at once, across every worker process: a per-key concurrency
	// limit, such as one customer's jobs at most 2 at a time. An admitted
	// job is waiting to run (available, scheduled or retrying) or running;
	// the key's other jobs wait in state pending and are admitted in enqueue
	// order as admitted ones complete, are cancelled or go dead. Jobs
	// without a key are not limited. It applies beside RateLimit and
	// MaxRunning. Default 0: none. On pgmsg.Client.UpdateQueue,
	// pgmsg.QueueKeyLimitNone removes it (and KeyField); raising it admits
	// the pending jobs it now allows at once.
	KeyLimit int `json:"key_limit,omitempty"`
	// KeyField names the top-level field of the jobs' JSON payloads whose
	// value is their limit key (a string as it is, a number as written),
	// for jobs enqueued without a LimitKey: a job without one fails with
	// pgmsg.ErrLimitKeyMissing. Needs KeyLimit. At most
	// pgmsg.QueueKeyFieldMaxBytes bytes. Default "": jobs give their key
	// (EnqueueParams.LimitKey) or have none.
	KeyField string `json:"key_field,omitempty"`
}

// Queue is a queue and its settings (every field filled in; a
// BackpressureTimeout of pgmsg.QueueBackpressureNoWait when full queues
// refuse enqueues at once).
type Queue struct {
	Name string `json:"name"`
	QueueConfig
	CreatedAt time.Time `json:"created_at"`
}
