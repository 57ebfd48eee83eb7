package store

import (
	"context"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// Tenant is one tenant of a fair queue as tenant_list() returns it.
type Tenant struct {
	Tenant      string
	Weight      float64
	Enqueued    int64
	Waiting     int64
	FinishTag   float64
	VirtualTime float64
}

// tenantWeightSetSQL is tenant_weight_set() (the schema rewritten by
// Store.SQL).
const tenantWeightSetSQL = `SELECT pgmsg.tenant_weight_set($1::text, $2::text, $3::double precision)`

// TenantWeightSet sets tenant's weight in queue.
func (s *Store) TenantWeightSet(ctx context.Context, exec DBTX, queue, tenant string, weight float64) error {
	_, err := exec.Exec(ctx, s.SQL(tenantWeightSetSQL), queue, tenant, weight)
	return errs.Map(err)
}

// tenantListSQL is tenant_list() (the schema rewritten by Store.SQL).
const tenantListSQL = `SELECT t.tenant, t.weight, t.enqueued, t.waiting, t.finish_tag, t.virtual_time
  FROM pgmsg.tenant_list($1::text, $2::integer, $3::text) t`

// TenantList lists at most limit tenants of queue with names after
// afterTenant ("": from the first), by name.
func (s *Store) TenantList(ctx context.Context, exec DBTX, queue string, limit int, afterTenant string) ([]Tenant, error) {
	rows, err := exec.Query(ctx, s.SQL(tenantListSQL), queue, limit32(limit), optText(afterTenant))
	if err != nil {
		return nil, errs.Map(err)
	}
	defer rows.Close()
	var out []Tenant
	for rows.Next() {
		var t Tenant
		if err := rows.Scan(&t.Tenant, &t.Weight, &t.Enqueued, &t.Waiting, &t.FinishTag, &t.VirtualTime); err != nil {
			return nil, errs.Map(err)
		}
		out = append(out, t)
	}
	return out, errs.Map(rows.Err())
}
