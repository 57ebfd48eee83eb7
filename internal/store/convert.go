package store

import (
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Conversions between pgtype's nullable values and plain Go values. They
// are the only place the store's callers' values meet pgtype.

// timePtr is t as a *time.Time, nil when NULL.
func timePtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}

// timestamptz is t for a nullable parameter: nil or the zero time is NULL.
func timestamptz(t *time.Time) pgtype.Timestamptz {
	if t == nil || t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}

// interval is d as an interval parameter (never NULL).
func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// limit32 converts a count or limit for an integer parameter of the SQL API
// without wrapping around: values above 1<<30 become 1<<30 (a cap no
// caller reaches) and negative ones stay negative, for the SQL API to
// refuse (as the root's limit32).
func limit32(v int) int32 {
	return int32(max(min(v, 1<<30), math.MinInt32))
}
