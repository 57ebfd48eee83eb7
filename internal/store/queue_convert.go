package store

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Conversions of the queue's statements between Go values and pgtype's
// nullable parameters (convert.go has the shared ones).

// optInterval is d for a nullable interval parameter: 0 is NULL.
func optInterval(d time.Duration) pgtype.Interval {
	if d == 0 {
		return pgtype.Interval{}
	}
	return interval(d)
}

// orZeroInterval is d for a setting whose SQL 0 means none: 0 is NULL
// (the default, or unchanged), a negative d is the interval 0 and any
// other d itself.
func orZeroInterval(d time.Duration) pgtype.Interval {
	if d < 0 {
		return interval(0)
	}
	return optInterval(d)
}

// optInt4 is v for a nullable integer parameter: 0 is NULL.
func optInt4(v int) pgtype.Int4 {
	if v == 0 {
		return pgtype.Int4{}
	}
	return pgtype.Int4{Int32: int32(v), Valid: true}
}

// orZeroInt4 is v for a setting whose SQL 0 means none: 0 is NULL, a
// negative v is 0 and any other v itself.
func orZeroInt4(v int) pgtype.Int4 {
	if v < 0 {
		return pgtype.Int4{Int32: 0, Valid: true}
	}
	return optInt4(v)
}

// orZeroInt8 is orZeroInt4 for a bigint.
func orZeroInt8(v int64) pgtype.Int8 {
	switch {
	case v == 0:
		return pgtype.Int8{}
	case v < 0:
		return pgtype.Int8{Int64: 0, Valid: true}
	}
	return pgtype.Int8{Int64: v, Valid: true}
}

// orZeroFloat8 is orZeroInt4 for a float8.
func orZeroFloat8(v float64) pgtype.Float8 {
	switch {
	case v == 0:
		return pgtype.Float8{}
	case v < 0:
		return pgtype.Float8{Float64: 0, Valid: true}
	}
	return pgtype.Float8{Float64: v, Valid: true}
}

// optText is s for a nullable text parameter: "" is NULL.
func optText(s string) pgtype.Text {
	if s == "" {
		return pgtype.Text{}
	}
	return pgtype.Text{String: s, Valid: true}
}

// optTime is t for a nullable timestamptz parameter: the zero time is
// NULL.
func optTime(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}

// micros is a duration the statements return as microseconds.
func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
