// Package errs is the one home of pgmsg's errors: every sentinel with its
// stable code, HTTP status and name; the Error type that carries one; and
// the mapping of database errors onto them. The root package re-exports
// each sentinel under its public name (pgmsg.ErrUnknownTopic is
// UnknownTopic) with its documentation; internal packages (the store
// layer first) use them from here, below the root in the import graph.
package errs

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The log's sentinels (PM0xx). Their documentation is on the root
// package's names (errors.go).
var (
	UnknownTopic        = newSentinel("unknown topic", "PM001", "unknown_topic", http.StatusNotFound)
	TopicExists         = newSentinel("topic already exists", "PM002", "topic_exists", http.StatusConflict)
	InvalidName         = newSentinel("invalid name", "PM003", "invalid_name", http.StatusBadRequest)
	InvalidArgument     = newSentinel("invalid argument", "PM004", "invalid_argument", http.StatusBadRequest)
	PartitionOutOfRange = newSentinel("partition out of range", "PM005", "partition_out_of_range", http.StatusBadRequest)
	RecordTooLarge      = newSentinel("record too large", "PM006", "record_too_large", http.StatusRequestEntityTooLarge)
	UnknownGroup        = newSentinel("unknown consumer group", "PM007", "unknown_group", http.StatusNotFound)
	ClaimExpired        = newSentinel("claim expired", "PM008", "claim_expired", http.StatusConflict)
	ClaimNotHeld        = newSentinel("claim not held", "PM009", "claim_not_held", http.StatusConflict)
	EmptyBatch          = newSentinel("empty batch", "PM010", "empty_batch", http.StatusBadRequest)
	InvalidOffset       = newSentinel("invalid offset", "PM011", "invalid_offset", http.StatusBadRequest)
	NotAssigned         = newSentinel("partition not assigned to member", "PM012", "not_assigned", http.StatusConflict)
	NotMember           = newSentinel("not a member of the group", "PM013", "not_member", http.StatusConflict)
	Backpressure        = newSentinel("backpressure", "PM014", "backpressure", http.StatusTooManyRequests)
	OutOfOrderSequence  = newSentinel("out of order sequence", "PM015", "out_of_order_sequence", http.StatusConflict)
	TopicNotEmpty       = newSentinel("topic not empty", "PM017", "topic_not_empty", http.StatusConflict)
	LogTruncated        = newSentinel("log truncated by failover", "PM020", "log_truncated", http.StatusConflict)
	DiskFull            = newSentinel("disk full", "PM021", "disk_full", http.StatusTooManyRequests)
	Closed              = newSentinel("closed", "", "closed", http.StatusConflict)
	BufferFull          = newSentinel("buffer full", "", "buffer_full", http.StatusTooManyRequests)
	UnknownKind         = newSentinel("unknown job kind", "", "unknown_kind", http.StatusNotFound)
)

// The queue's sentinels (PM1xx).
var (
	UnknownQueue       = newSentinel("unknown queue", "PM101", "unknown_queue", http.StatusNotFound)
	QueueExists        = newSentinel("queue already exists", "PM102", "queue_exists", http.StatusConflict)
	PayloadTooLarge    = newSentinel("payload too large", "PM103", "payload_too_large", http.StatusRequestEntityTooLarge)
	InvalidDelay       = newSentinel("invalid delay", "PM104", "invalid_delay", http.StatusBadRequest)
	InvalidMaxAttempts = newSentinel("invalid max attempts", "PM105", "invalid_max_attempts", http.StatusBadRequest)
	JobNotHeld         = newSentinel("job not held", "PM106", "job_not_held", http.StatusConflict)
	UnknownJob         = newSentinel("unknown job", "PM107", "unknown_job", http.StatusNotFound)
	QueueNotEmpty      = newSentinel("queue not empty", "PM108", "queue_not_empty", http.StatusConflict)
	QueueFull          = newSentinel("queue full", "PM109", "queue_full", http.StatusTooManyRequests)
	JobNotWaiting      = newSentinel("job not waiting", "PM110", "job_not_waiting", http.StatusConflict)
	UnknownPeriodicJob = newSentinel("unknown periodic job", "PM111", "unknown_periodic_job", http.StatusNotFound)
	InvalidSchedule    = newSentinel("invalid schedule", "PM112", "invalid_schedule", http.StatusBadRequest)
	LimitKeyMissing    = newSentinel("limit key missing", "PM113", "limit_key_missing", http.StatusBadRequest)
	UnknownDependency  = newSentinel("unknown dependency", "PM114", "unknown_dependency", http.StatusBadRequest)
	DependencyQueue    = newSentinel("dependency in another queue", "PM115", "dependency_queue", http.StatusBadRequest)
	DependencyCycle    = newSentinel("dependency cycle", "PM116", "dependency_cycle", http.StatusBadRequest)
	TooManyDeps        = newSentinel("too many dependencies", "PM117", "too_many_dependencies", http.StatusBadRequest)
	InvalidTenant      = newSentinel("invalid tenant", "PM118", "invalid_tenant", http.StatusBadRequest)
	InvalidWeight      = newSentinel("invalid tenant weight", "PM119", "invalid_tenant_weight", http.StatusBadRequest)
	InvalidStepName    = newSentinel("invalid step name", "PM122", "invalid_step_name", http.StatusBadRequest)
	StepTooLarge       = newSentinel("step output too large", "PM123", "step_too_large", http.StatusBadRequest)
	InvalidCallback    = newSentinel("invalid batch callback", "PM120", "invalid_batch_callback", http.StatusBadRequest)
	UnknownBatch       = newSentinel("unknown batch", "PM121", "unknown_batch", http.StatusNotFound)
	NotEnoughReplicas  = newSentinel("not enough replicas", "PM124", "not_enough_replicas", http.StatusServiceUnavailable)
	JobTimeout         = newSentinel("job timed out", "", "job_timeout", http.StatusRequestTimeout)
)

// The tokens' sentinels (PMAxx).
var (
	UnknownToken = newSentinel("unknown token", "PMA01", "unknown_token", http.StatusNotFound)
	InvalidToken = newSentinel("invalid token", "PMA02", "invalid_token", http.StatusUnauthorized)
	TokenExists  = newSentinel("token already exists", "PMA03", "token_exists", http.StatusConflict)
)

// Sentinel is the type of pgmsg's sentinel errors (pgmsg.Sentinel). Each
// names one condition and carries everything a surface needs to report it:
// the stable code the SQL API raises as its SQLSTATE (PM001 ...; empty for
// a condition only the Go library reports), the name the HTTP API and the
// CLI's JSON output use, and the HTTP status it is answered with. Match
// sentinels with errors.Is; errors.As with a *Sentinel finds the one an
// error carries.
type Sentinel struct {
	msg, code, name string
	status          int
}

func (s *Sentinel) Error() string { return s.msg }

// Code is the stable SQLSTATE-style code, or "" for a Go-only condition.
func (s *Sentinel) Code() string { return s.code }

// Name is the stable snake_case name of the HTTP API's error bodies.
func (s *Sentinel) Name() string { return s.name }

// HTTPStatus is the status the HTTP API answers the condition with.
func (s *Sentinel) HTTPStatus() int { return s.status }

var (
	// sentinels lists every sentinel in declaration order.
	sentinels      []*Sentinel
	codeToSentinel = map[string]*Sentinel{}
)

// newSentinel declares a sentinel; the SQL API's codes map back to it.
func newSentinel(msg, code, name string, status int) *Sentinel {
	s := &Sentinel{msg: msg, code: code, name: name, status: status}
	if code != "" {
		if _, dup := codeToSentinel[code]; dup {
			panic("pgmsg: duplicate error code " + code)
		}
		codeToSentinel[code] = s
	}
	sentinels = append(sentinels, s)
	return s
}

// Sentinels returns every sentinel, in a stable order.
func Sentinels() []*Sentinel { return append([]*Sentinel(nil), sentinels...) }

// Error is an error with a stable code (pgmsg.Error), returned for every
// condition that has a sentinel. It matches its sentinel with errors.Is
// and, when the SQL API raised it, wraps the *pgconn.PgError.
type Error struct {
	// Code is the stable SQLSTATE-style code (PM001 ...) of the condition.
	Code string
	// Message says what was wrong, naming the offending value.
	Message string
	kind    *Sentinel
	cause   error
}

func (e *Error) Error() string { return "pgmsg: " + e.Message }

// Unwrap returns the sentinel and, if any, the database error.
func (e *Error) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

// New builds an Error of sentinel kind; used for checks done in Go
// before a round trip.
func New(kind *Sentinel, format string, args ...any) *Error {
	return &Error{Code: kind.code, Message: fmt.Sprintf(format, args...), kind: kind}
}

// Wrap is New with the error that caused it (nil for none).
func Wrap(kind *Sentinel, cause error, format string, args ...any) *Error {
	e := New(kind, format, args...)
	e.cause = cause
	return e
}

// Code returns the stable code of err (PM001 ...), or "" if err has none.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Map is the one place database errors become pgmsg errors: an error the
// SQL API raised with one of the codes becomes an *Error of its sentinel,
// and an input the database refused (IsInput) becomes InvalidArgument;
// other errors are returned unchanged.
func Map(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if kind, ok := codeToSentinel[pgErr.Code]; ok {
			return &Error{Code: pgErr.Code, Message: pgErr.Message, kind: kind, cause: err}
		}
		if pgErr.Code == sqlstateDiskFull {
			return &Error{Code: DiskFull.code, Message: "disk full: " + pgErr.Message, kind: DiskFull, cause: err}
		}
		if isInputCode(pgErr.Code) {
			return &Error{Code: InvalidArgument.code, Message: "invalid argument: " + pgErr.Message,
				kind: InvalidArgument, cause: err}
		}
		if IsLockTableFull(err) {
			return &lockTableFullError{err}
		}
	}
	return err
}

// IsLockTableFull reports whether err is PostgreSQL's "out of shared
// memory" of a full lock table (53200, with the hint to raise
// max_locks_per_transaction): a transaction locked more tables and
// indexes than the lock table holds, which every session shares
// (max_locks_per_transaction × (max_connections +
// max_prepared_transactions)). Each segment of a topic is a table and an
// index, and a statement locks each one it reads or drops until its
// transaction ends.
func IsLockTableFull(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateOutOfMemory && strings.Contains(pgErr.Hint, "max_locks_per_transaction")
}

// lockTableFullError says what a full lock table means for pgmsg: the
// driver's error text leaves PostgreSQL's hint out.
type lockTableFullError struct{ cause error }

func (e *lockTableFullError) Error() string {
	return e.cause.Error() + ": PostgreSQL's lock table is full (a statement locked more segment tables and indexes than " +
		"max_locks_per_transaction allows): raise max_locks_per_transaction, or use larger segment_records " +
		"(docs/operations.md, \"Many segments and the lock table\")"
}

func (e *lockTableFullError) Unwrap() error { return e.cause }

// SQLSTATEs (PostgreSQL, Appendix A) named by the mapping.
const (
	sqlstateClassDataException   = "22"
	sqlstateProgramLimitExceeded = "54000"
	sqlstateDiskFull             = "53100" // disk_full
	sqlstateOutOfMemory          = "53200" // out_of_memory (a full lock table among others)
	sqlstateClassConnection      = "08"    // connection exception
	sqlstateCheckViolation       = "23514"
	sqlstateUndefinedTable       = "42P01"
)

// isInputCode reports whether a PostgreSQL SQLSTATE says the input was bad
// or too large rather than the database failing: a data exception (class
// 22: a value out of range, too long, malformed, with a NUL byte ...) or
// 54000 program_limit_exceeded (such as an index row too large). The
// checks of the SQL API should catch these first; they map to
// InvalidArgument (PM004) so that no surface reports them as internal.
func isInputCode(code string) bool {
	return strings.HasPrefix(code, sqlstateClassDataException) || code == sqlstateProgramLimitExceeded
}

// IsInput reports whether err is a database error that says the input was
// bad or too large (see Map).
func IsInput(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && isInputCode(pgErr.Code)
}

// retryableSQLState lists failures that may pass when tried again unchanged.
var retryableSQLState = map[string]bool{
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"55P03": true, // lock_not_available (lock_timeout)
	"57014": true, // query_canceled (statement_timeout)
	"57P01": true, // admin_shutdown
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now
	"53300": true, // too_many_connections
}

// IsRetryable reports whether an operation that failed with err may succeed
// if tried again unchanged: connection loss, serialization failures,
// deadlocks and lock or statement timeouts, and the sentinels that say
// "not now" (those answered with 429, and NotEnoughReplicas, 503: the
// write was refused before it was stored). Every other sentinel is the
// caller's to fix.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if s, ok := errors.AsType[*Sentinel](err); ok {
		return s.status == http.StatusTooManyRequests || s == NotEnoughReplicas
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return retryableSQLState[pgErr.Code] || strings.HasPrefix(pgErr.Code, sqlstateClassConnection)
	}
	if errors.Is(err, pgx.ErrTxClosed) {
		return false
	}
	var ce *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &ce)
}

// IsDatabase reports whether err came from the server (a *pgconn.PgError),
// as opposed to the connection.
func IsDatabase(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// IsStatementError reports an error the server raised while running a
// statement (severity ERROR): the statement's transaction, or the
// autocommit statement, was rolled back. A FATAL or PANIC one ends the
// session and may come after a commit (a backend terminated while it
// answered), so it says nothing of what was stored.
func IsStatementError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	sev := pgErr.SeverityUnlocalized
	if sev == "" {
		sev = pgErr.Severity
	}
	return sev == "ERROR"
}

// SafeToRetry reports an error pgx says was returned before anything
// reached the server.
func SafeToRetry(err error) bool { return pgconn.SafeToRetry(err) }

// IsUndefinedTable reports an error that names a table that does not
// exist (42P01): a segment retention dropped, or that a replica has not
// replayed yet.
func IsUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateUndefinedTable
}

// NoPartitionFor returns the table named by PostgreSQL's "no partition of
// relation T found for row" (check_violation while routing an insert).
func NoPartitionFor(err error) (table string, ok bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateCheckViolation {
		return pgErr.TableName, true
	}
	return "", false
}

// backpressureDetail prefixes the DETAIL of the SQL API's "not now"
// errors (PM014, PM109; _raise_backpressure in functions/common.sql).
const backpressureDetail = "backpressure_timeout_ms="

// BackpressureWait returns how long a publish or enqueue refused with
// Backpressure or QueueFull should keep being retried, as the SQL API
// said in the error's DETAIL (the topic's backpressure_timeout_ms, the
// queue's backpressure_timeout); ok is false when err carries none.
func BackpressureWait(err error) (wait time.Duration, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Detail, backpressureDetail) {
		return 0, false
	}
	ms, perr := strconv.ParseInt(strings.TrimPrefix(pgErr.Detail, backpressureDetail), 10, 64)
	if perr != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
