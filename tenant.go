package pgmsg

import (
	"context"
	"math"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/queue"
)

// Tenant is a tenant of a fair queue (EnqueueParams.Tenant), as
// ListTenants reports it.
type Tenant struct {
	Tenant string `json:"tenant"`
	// Weight is the tenant's share of the queue's claims among the
	// tenants with jobs waiting: weight / the sum of their weights.
	Weight float64 `json:"weight"`
	// Enqueued counts the tenant's jobs enqueued in all; Waiting those
	// not claimed yet (available, scheduled, retrying, pending).
	Enqueued int64 `json:"enqueued"`
	Waiting  int64 `json:"waiting"`
	// FinishTag is where the tenant's next job starts unless the queue's
	// VirtualTime is later: FinishTag - VirtualTime is how far the tenant
	// is ahead of the queue, in jobs at weight 1.
	FinishTag   float64 `json:"finish_tag"`
	VirtualTime float64 `json:"virtual_time"`
}

// ListTenantsOpts pages ListTenants.
type ListTenantsOpts struct {
	// Limit is the most tenants returned, 1 to 10,000; 0 means 100.
	Limit int
	// AfterTenant continues a listing after this tenant (the last one of
	// the previous page); "" starts at the first.
	AfterTenant string
}

// SetTenantWeight sets tenant's weight in queue (default 1): among the
// tenants with jobs waiting, each gets weight / the sum of their weights
// of the queue's claims. It applies to the tenant's jobs enqueued
// afterwards. It fails with ErrUnknownQueue, ErrInvalidTenant, and
// ErrInvalidTenantWeight for a weight that is not from TenantWeightMin to
// TenantWeightMax.
func (c *Client) SetTenantWeight(ctx context.Context, queueName, tenant string, weight float64) error {
	if tenant == "" {
		return errs.New(errs.InvalidTenant, "tenant must not be empty")
	}
	if err := queue.CheckTenant("weight", tenant); err != nil {
		return err
	}
	if math.IsNaN(weight) || weight < TenantWeightMin || weight > TenantWeightMax {
		return errs.New(errs.InvalidWeight, "weight must be from %g to %g, got %g", TenantWeightMin, float64(TenantWeightMax), weight)
	}
	return c.queues.TenantWeightSet(ctx, queueName, tenant, weight)
}

// ListTenants lists queue's tenants by name, with their weights and
// counts. It fails with ErrUnknownQueue, and ErrInvalidArgument for a
// Limit out of range.
func (c *Client) ListTenants(ctx context.Context, queueName string, opts *ListTenantsOpts) ([]*Tenant, error) {
	var o ListTenantsOpts
	if opts != nil {
		o = *opts
	}
	if o.Limit == 0 {
		o.Limit = 100
	}
	if o.Limit < 1 || o.Limit > 10000 {
		return nil, errs.New(errs.InvalidArgument, "limit must be from 1 to 10000, got %d", o.Limit)
	}
	rows, err := c.queues.TenantList(ctx, queueName, o.Limit, o.AfterTenant)
	if err != nil {
		return nil, err
	}
	out := make([]*Tenant, len(rows))
	for i, r := range rows {
		out[i] = &Tenant{Tenant: r.Tenant, Weight: r.Weight, Enqueued: r.Enqueued, Waiting: r.Waiting,
			FinishTag: r.FinishTag, VirtualTime: r.VirtualTime}
	}
	return out, nil
}
