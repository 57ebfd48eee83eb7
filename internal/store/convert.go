package store

import (
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
