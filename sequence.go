package pgmsg

import (
	"context"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
)

// Sequence is a sequence of a queue (EnqueueParams.SequenceKey) that has
// live jobs or is held, as ListSequences reports it.
type Sequence struct {
	Key string `json:"key"`
	// HeadID is the job that runs or runs next (available, scheduled,
	// retrying or running); 0 while the sequence is held.
	HeadID    int64    `json:"head_id,omitempty"`
	HeadState JobState `json:"head_state,omitempty"`
	// Pending counts the jobs waiting behind the head.
	Pending int64 `json:"pending"`
	// HeldJobID is the job whose failure holds the sequence (0: not
	// held), HeldReason why ("dead" or "cancelled"), HeldAt since when.
	HeldJobID  int64      `json:"held_job_id,omitempty"`
	HeldReason string     `json:"held_reason,omitempty"`
	HeldAt     *time.Time `json:"held_at,omitempty"`
}

// ListSequencesOpts filters and pages ListSequences.
type ListSequencesOpts struct {
	// HeldOnly lists only held sequences.
	HeldOnly bool
	// Limit is the most sequences returned, 1 to 10,000; 0 means 100.
	Limit int
	// AfterKey continues a listing after this key (the last one of the
	// previous page); "" starts at the first.
	AfterKey string
}

// ListSequences lists queue's sequences that have live jobs or are held,
// by key. It fails with ErrUnknownQueue, and ErrInvalidArgument for a
// Limit out of range.
func (c *Client) ListSequences(ctx context.Context, queue string, opts *ListSequencesOpts) ([]*Sequence, error) {
	var o ListSequencesOpts
	if opts != nil {
		o = *opts
	}
	if o.Limit == 0 {
		o.Limit = 100
	}
	if o.Limit < 1 || o.Limit > 10000 {
		return nil, errs.New(errs.InvalidArgument, "limit must be from 1 to 10000, got %d", o.Limit)
	}
	rows, err := c.queues.SequenceList(ctx, queue, o.HeldOnly, o.Limit, o.AfterKey)
	if err != nil {
		return nil, err
	}
	out := make([]*Sequence, len(rows))
	for i, r := range rows {
		s := &Sequence{Key: r.Key, HeadID: r.HeadID, HeadState: JobState(r.HeadState), Pending: r.Pending,
			HeldJobID: r.HeldJobID, HeldReason: r.HeldReason}
		if r.HeldReason != "" {
			at := r.HeldAt
			s.HeldAt = &at
		}
		out[i] = s
	}
	return out, nil
}

// ResumeSequence resumes a held sequence of queue: a job of it that went
// dead or was cancelled (without EnqueueParams.SequenceContinue) holds the
// jobs behind it until this call, which lets the next one run. The failed
// job stays where it is (dead, or cancelled in the archive). Requeueing
// the dead job instead (RequeueDeadJobs) resumes the sequence with that
// job, which runs next. It returns false when the sequence was not held,
// and fails with ErrUnknownQueue, or ErrInvalidArgument for a key that is
// not 1 to SequenceKeyMaxBytes bytes.
func (c *Client) ResumeSequence(ctx context.Context, queue, key string) (bool, error) {
	if key == "" || len(key) > SequenceKeyMaxBytes {
		return false, errs.New(errs.InvalidArgument, "sequence key must be 1 to %d bytes, got %d", SequenceKeyMaxBytes, len(key))
	}
	return c.queues.SequenceResume(ctx, queue, key)
}

// SequenceJob is one job of a sequence, as GetSequence reports it.
type SequenceJob struct {
	ID          int64      `json:"id"`
	State       JobState   `json:"state"`
	AttemptedAt *time.Time `json:"attempted_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// SequenceJobs is one sequence's progress, as GetSequence reports it.
type SequenceJobs struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
	// Head is the job that runs or runs next (nil: none, the sequence is
	// held or has no live job).
	Head *SequenceJob `json:"head,omitempty"`
	// Pending are the first jobs waiting behind the head, in the order
	// they will run (at most GetSequenceOpts.Limit), of PendingTotal.
	Pending      []*SequenceJob `json:"pending"`
	PendingTotal int64          `json:"pending_total"`
	// Held is the dead or cancelled job that holds the sequence (nil: not
	// held), HeldReason why ("dead" or "cancelled").
	Held       *SequenceJob `json:"held,omitempty"`
	HeldReason string       `json:"held_reason,omitempty"`
	// Last is the sequence's most recently archived job (completed or
	// cancelled) among the queue's SequenceRecentArchived newest archived
	// jobs (nil: none there).
	Last *SequenceJob `json:"last,omitempty"`
}

// SequenceRecentArchived is how many of a queue's newest archived jobs
// GetSequence reads to find a sequence's last one: the archive has no
// index by sequence.
const SequenceRecentArchived = store.SequenceRecentArchived

// GetSequenceOpts are options of GetSequence; nil means defaults.
type GetSequenceOpts struct {
	// Limit is the most pending jobs returned, 1 to 1,000; 0 means 20.
	Limit int
}

// GetSequence returns the progress of queue's sequence key: the job that
// runs or runs next, the first jobs waiting behind it in order, the job
// holding it if it is held, and its last archived job. It fails with
// ErrUnknownQueue, and ErrInvalidArgument for a key that is not 1 to
// SequenceKeyMaxBytes bytes or a Limit out of range. A key with no job is
// an empty answer, not an error.
func (c *Client) GetSequence(ctx context.Context, queue, key string, opts *GetSequenceOpts) (*SequenceJobs, error) {
	if key == "" || len(key) > SequenceKeyMaxBytes {
		return nil, errs.New(errs.InvalidArgument, "sequence key must be 1 to %d bytes, got %d", SequenceKeyMaxBytes, len(key))
	}
	limit := 20
	if opts != nil && opts.Limit != 0 {
		limit = opts.Limit
	}
	if limit < 1 || limit > 1000 {
		return nil, errs.New(errs.InvalidArgument, "limit must be from 1 to 1000, got %d", limit)
	}
	r, err := c.queues.SequenceJobs(ctx, queue, key, limit)
	if err != nil {
		return nil, err
	}
	conv := func(j *store.SequenceJob) *SequenceJob {
		if j == nil {
			return nil
		}
		return &SequenceJob{ID: j.ID, State: JobState(j.State), AttemptedAt: j.AttemptedAt, FinishedAt: j.FinishedAt}
	}
	out := &SequenceJobs{Queue: queue, Key: key, Head: conv(r.Head), Held: conv(r.Held), HeldReason: r.HeldReason,
		Last: conv(r.Last), PendingTotal: r.PendingTotal, Pending: make([]*SequenceJob, len(r.Pending))}
	for i := range r.Pending {
		out.Pending[i] = conv(&r.Pending[i])
	}
	return out, nil
}
