package errs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestMapAndBackpressureWait(t *testing.T) {
	pgErr := &pgconn.PgError{Code: "PM014", Message: "backpressure: ...", Detail: "backpressure_timeout_ms=2500"}
	err := Map(fmt.Errorf("publish: %w", pgErr))
	if !errors.Is(err, Backpressure) || Code(err) != "PM014" || !IsRetryable(err) {
		t.Fatalf("Map(PM014) = %v (code %q)", err, Code(err))
	}
	if wait, ok := BackpressureWait(err); !ok || wait != 2500*time.Millisecond {
		t.Fatalf("BackpressureWait = %v, %v; want 2.5s, true", wait, ok)
	}
	for _, detail := range []string{"", "backpressure_timeout_ms=", "backpressure_timeout_ms=-1", "other=5"} {
		if _, ok := BackpressureWait(&pgconn.PgError{Code: "PM109", Detail: detail}); ok {
			t.Errorf("BackpressureWait(detail %q) ok", detail)
		}
	}
	if _, ok := BackpressureWait(errors.New("x")); ok {
		t.Error("BackpressureWait of a non-database error ok")
	}
	in := Map(&pgconn.PgError{Code: "22021", Message: "invalid byte sequence"})
	if !errors.Is(in, InvalidArgument) || !IsInput(in) {
		t.Fatalf("Map(22021) = %v", in)
	}
	other := &pgconn.PgError{Code: "XX000"}
	if Map(other) != error(other) {
		t.Fatal("Map changed an unmapped error")
	}
}

func TestSentinelsUnique(t *testing.T) {
	names := map[string]bool{}
	for _, s := range Sentinels() {
		if names[s.Name()] {
			t.Errorf("two sentinels named %s", s.Name())
		}
		names[s.Name()] = true
		if s.HTTPStatus() < 400 || s.HTTPStatus() > 599 {
			t.Errorf("%s: status %d", s.Name(), s.HTTPStatus())
		}
	}
}

// A full lock table's "out of shared memory" says what to do (the
// driver's text leaves PostgreSQL's hint out) and still unwraps to the
// PostgreSQL error; another 53200 is left as it is.
func TestMapLockTableFull(t *testing.T) {
	full := &pgconn.PgError{Code: "53200", Message: "out of shared memory", Hint: "You might need to increase max_locks_per_transaction."}
	err := Map(full)
	if !IsLockTableFull(err) || !strings.Contains(err.Error(), "raise max_locks_per_transaction") || !strings.Contains(err.Error(), "out of shared memory") {
		t.Fatalf("Map(%v) = %v", full, err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr != full {
		t.Fatalf("Map(%v) does not unwrap to it: %v", full, err)
	}
	other := &pgconn.PgError{Code: "53200", Message: "out of shared memory"}
	if err := Map(other); err != other || IsLockTableFull(err) {
		t.Fatalf("Map(%v) = %v", other, err)
	}
}
