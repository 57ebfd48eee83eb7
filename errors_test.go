package pgmsg

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// Input errors PostgreSQL raises itself (a value too long or out of range,
// an index row too large) are the caller's fault: ErrInvalidArgument, never
// an error without a code that the HTTP API would answer with a 500.
func TestMapErrorInputErrors(t *testing.T) {
	for _, code := range []string{"54000", "22001", "22003", "22P02", "22007", "22008"} {
		err := MapError(&pgconn.PgError{Code: code, Message: "m"})
		if !errors.Is(err, ErrInvalidArgument) || ErrorCode(err) != "PM004" {
			t.Errorf("%s: got %v (code %q), want ErrInvalidArgument", code, err, ErrorCode(err))
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != code {
			t.Errorf("%s: the database error is not reachable", code)
		}
		if IsRetryable(err) {
			t.Errorf("%s: reported retryable", code)
		}
	}
	for _, code := range []string{"40001", "57014", "54001"} {
		if ErrorCode(MapError(&pgconn.PgError{Code: code})) != "" {
			t.Errorf("%s: mapped to an input error", code)
		}
	}
}

// FuzzIsRetryable: classifying any database error never panics, and
// errors with a pgmsg code are never retryable, except backpressure
// (PM014 ErrBackpressure, PM109 ErrQueueFull), which clears when consumers
// or workers make room, and a full disk (PM021 ErrDiskFull), which clears
// when space returns. (The fuzzer found PM109 once the queue limit
// existed; the f.Add inputs keep both in every run.)
func FuzzIsRetryable(f *testing.F) {
	for _, c := range []string{"", "0", "08", "08006", "40001", "PM001", "PM106", "57014", "XX000", "zzzzz", "PM014", "PM109", "PM021"} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, code string) {
		if pgtest.IgnoreKnown && len(code) < 2 {
			t.Skip("known bug: IsRetryable panics on a PgError code shorter than 2 bytes")
		}
		err := MapError(&pgconn.PgError{Code: code, Message: "m"})
		var retry bool
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("IsRetryable(PgError{Code: %q}) panics: %v", code, p)
				}
			}()
			retry = IsRetryable(err)
		}()
		clears := errors.Is(err, ErrBackpressure) || errors.Is(err, ErrQueueFull) || errors.Is(err, ErrDiskFull)
		if ErrorCode(err) != "" && retry != clears {
			t.Fatalf("code %q (a pgmsg code): IsRetryable = %v, want %v (only backpressure and a full disk are retryable)", code, retry, clears)
		}
		_ = IsRetryable(fmt.Errorf("wrapped: %w", err))
	})
}
