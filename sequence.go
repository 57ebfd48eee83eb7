package pgmsg

import (
	"context"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
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
