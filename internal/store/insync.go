package store

import (
	"context"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// MinInsyncReplicas returns the schema's min_insync_replicas
// (min_insync_replicas(): 1 no guard, 2 writes need a synchronous standby).
func (s *Store) MinInsyncReplicas(ctx context.Context, exec DBTX) (int, error) {
	var n int32
	err := exec.QueryRow(ctx, s.SQL(`SELECT pgmsg.min_insync_replicas()`)).Scan(&n)
	return int(n), errs.Map(err)
}

// MinInsyncReplicasSet sets it (min_insync_replicas_set()).
func (s *Store) MinInsyncReplicasSet(ctx context.Context, exec DBTX, n int) error {
	_, err := exec.Exec(ctx, s.SQL(`SELECT pgmsg.min_insync_replicas_set($1::integer)`), int32(n))
	return errs.Map(err)
}
