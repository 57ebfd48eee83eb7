package store

import (
	"context"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// LimitKey is one key of a queue's per-key limit as key_limit_list()
// returns it: its jobs running, admitted but not running, and pending.
type LimitKey struct {
	Key     string
	Running int64
	Waiting int64
	Pending int64
}

// keyLimitListSQL is key_limit_list() (the schema rewritten by Store.SQL).
const keyLimitListSQL = `SELECT k.limit_key, k.running, k.waiting, k.pending
  FROM pgmsg.key_limit_list($1::text, $2::integer, $3::text) k`

// KeyLimitList lists at most limit limit keys of queue with admitted or
// pending jobs, with keys after afterKey ("": from the first), by key.
func (s *Store) KeyLimitList(ctx context.Context, exec DBTX, queue string, limit int, afterKey string) ([]LimitKey, error) {
	rows, err := exec.Query(ctx, s.SQL(keyLimitListSQL), queue, limit32(limit), optText(afterKey))
	if err != nil {
		return nil, errs.Map(err)
	}
	defer rows.Close()
	var out []LimitKey
	for rows.Next() {
		var k LimitKey
		if err := rows.Scan(&k.Key, &k.Running, &k.Waiting, &k.Pending); err != nil {
			return nil, errs.Map(err)
		}
		out = append(out, k)
	}
	return out, errs.Map(rows.Err())
}
