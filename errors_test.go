package pgmsg

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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
