package pgmsg

import (
	"context"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// LimitKey is a key of a queue's per-key limit (QueueConfig.KeyLimit)
// that has admitted or pending jobs, as ListLimitKeys reports it.
type LimitKey struct {
	Key string `json:"key"`
	// Running counts the key's jobs running; Waiting its other admitted
	// jobs (available, scheduled or retrying); together at most the
	// queue's KeyLimit (more only while a lowered limit drains).
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
	// Pending counts the key's jobs waiting for a place.
	Pending int64 `json:"pending"`
}

// ListLimitKeysOpts pages ListLimitKeys.
type ListLimitKeysOpts struct {
	// Limit is the most keys returned, 1 to 10,000; 0 means 100.
	Limit int
	// AfterKey continues a listing after this key (the last one of the
	// previous page); "" starts at the first.
	AfterKey string
}

// ListLimitKeys lists queue's limit keys that have admitted or pending
// jobs, by key, with their counts. It fails with ErrUnknownQueue, and
// ErrInvalidArgument for a Limit out of range.
func (c *Client) ListLimitKeys(ctx context.Context, queue string, opts *ListLimitKeysOpts) ([]*LimitKey, error) {
	var o ListLimitKeysOpts
	if opts != nil {
		o = *opts
	}
	if o.Limit == 0 {
		o.Limit = 100
	}
	if o.Limit < 1 || o.Limit > 10000 {
		return nil, errs.New(errs.InvalidArgument, "limit must be from 1 to 10000, got %d", o.Limit)
	}
	rows, err := c.queues.KeyLimitList(ctx, queue, o.Limit, o.AfterKey)
	if err != nil {
		return nil, err
	}
	out := make([]*LimitKey, len(rows))
	for i, r := range rows {
		out[i] = &LimitKey{Key: r.Key, Running: r.Running, Waiting: r.Waiting, Pending: r.Pending}
	}
	return out, nil
}
