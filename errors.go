package pgmsg

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors. Every error pgmsg returns for bad input or a lost claim
// matches one of these with errors.Is; the underlying *pgconn.PgError (for
// errors raised by the SQL API) stays reachable with errors.As. Each has a
// stable code (Error.Code), the SQLSTATE the SQL API raises.
var (
	// ErrUnknownTopic is returned when a topic does not exist (PM001).
	ErrUnknownTopic = newSentinel("unknown topic", "PM001", "unknown_topic", http.StatusNotFound)
	// ErrTopicExists is returned by CreateTopic when the name is taken (PM002).
	ErrTopicExists = newSentinel("topic already exists", "PM002", "topic_exists", http.StatusConflict)
	// ErrInvalidName is returned for a topic or group name that is not 1-200
	// letters, digits, '.', '_' or '-' (PM003).
	ErrInvalidName = newSentinel("invalid name", "PM003", "invalid_name", http.StatusBadRequest)
	// ErrInvalidArgument is returned for an argument out of its range, such as
	// partitions outside 1..1024 or a non-positive lease (PM004).
	ErrInvalidArgument = newSentinel("invalid argument", "PM004", "invalid_argument", http.StatusBadRequest)
	// ErrPartitionOutOfRange is returned when a partition number is not one
	// of the topic's (PM005).
	ErrPartitionOutOfRange = newSentinel("partition out of range", "PM005", "partition_out_of_range", http.StatusBadRequest)
	// ErrRecordTooLarge is returned when a record's key, value and headers
	// exceed the topic's max_record_bytes (PM006). Nothing of the batch is written.
	ErrRecordTooLarge = newSentinel("record too large", "PM006", "record_too_large", http.StatusRequestEntityTooLarge)
	// ErrUnknownGroup is returned when a consumer group does not exist on the
	// topic (PM007).
	ErrUnknownGroup = newSentinel("unknown consumer group", "PM007", "unknown_group", http.StatusNotFound)
	// ErrClaimExpired is returned by Commit, Release and Extend when the
	// claim's lease ran out (PM008); its records will be delivered again.
	ErrClaimExpired = newSentinel("claim expired", "PM008", "claim_expired", http.StatusConflict)
	// ErrClaimNotHeld is returned by Commit, Release and Extend when the claim
	// was already committed or released, the group was reset, or another
	// member claimed the partition after the lease ran out (PM009).
	ErrClaimNotHeld = newSentinel("claim not held", "PM009", "claim_not_held", http.StatusConflict)
	// ErrEmptyBatch is returned when a publish has no records (PM010).
	ErrEmptyBatch = newSentinel("empty batch", "PM010", "empty_batch", http.StatusBadRequest)
	// ErrInvalidOffset is returned for a negative offset, an unparseable
	// position or a commit offset outside the claim (PM011).
	ErrInvalidOffset = newSentinel("invalid offset", "PM011", "invalid_offset", http.StatusBadRequest)
	// ErrNotAssigned is returned when a group member claims a partition that
	// is not assigned to it (PM012): another member owns it now.
	ErrNotAssigned = newSentinel("partition not assigned to member", "PM012", "not_assigned", http.StatusConflict)
	// ErrNotMember is returned when a member claims after leaving the group
	// or after its session expired (PM013); it must heartbeat to rejoin.
	ErrNotMember = newSentinel("not a member of the group", "PM013", "not_member", http.StatusConflict)
	// ErrBackpressure is returned by publishes to a topic whose slowest
	// group is too far behind (PM014): the publish would put a partition
	// more than the topic's max_lag_records records, or max_lag_bytes bytes
	// of keys and values, ahead of it. Publish and the Producer first retry
	// for up to the topic's backpressure_timeout_ms (default 5000; 0 fails
	// at once); PublishTx fails at once. Nothing was written.
	ErrBackpressure = newSentinel("backpressure", "PM014", "backpressure", http.StatusTooManyRequests)
	// ErrOutOfOrderSequence is returned by an idempotent publish
	// (PublishIdempotent, a Producer with Idempotent set) whose sequence
	// numbers do not come after the producer's last stored batch on a
	// partition and are not that batch again (PM015): a reordered or
	// overlapping batch. Nothing was written.
	ErrOutOfOrderSequence = newSentinel("out of order sequence", "PM015", "out_of_order_sequence", http.StatusConflict)
	// ErrClosed is returned by a Producer used after Close.
	ErrClosed = newSentinel("closed", "", "closed", http.StatusConflict)
	// ErrBufferFull is returned by a Producer with FailWhenFull whose
	// buffer holds MaxBufferedRecords records or MaxBufferedBytes bytes.
	// Nothing of the record was written; IsRetryable reports true.
	ErrBufferFull = newSentinel("buffer full", "", "buffer_full", http.StatusTooManyRequests)
	// ErrUnknownKind is the error of a job attempt that Kinds.Handle could
	// not route: no handler is registered for the job's kind.
	ErrUnknownKind = newSentinel("unknown job kind", "", "unknown_kind", http.StatusNotFound)
)

// Sentinel is the type of pgmsg's sentinel errors. Each names one
// condition and carries everything a surface needs to report it: the
// stable code the SQL API raises as its SQLSTATE (PM001 ...; empty for a
// condition only the Go library reports), the name the HTTP API and the
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
	codeToSentinel = map[string]error{}
	sentinelToCode = map[error]string{}
)

// newSentinel declares a sentinel; the SQL API's codes map back to it.
func newSentinel(msg, code, name string, status int) error {
	s := &Sentinel{msg: msg, code: code, name: name, status: status}
	if code != "" {
		if _, dup := codeToSentinel[code]; dup {
			panic("pgmsg: duplicate error code " + code)
		}
		codeToSentinel[code] = s
		sentinelToCode[s] = code
	}
	sentinels = append(sentinels, s)
	return s
}

// Sentinels returns every sentinel error of the library, in a stable order.
func Sentinels() []*Sentinel { return append([]*Sentinel(nil), sentinels...) }

// Error is an error with a stable code, returned for every condition that
// has a sentinel. It matches its sentinel with errors.Is and, when the SQL
// API raised it, wraps the *pgconn.PgError.
type Error struct {
	// Code is the stable SQLSTATE-style code (PM001 ...) of the condition.
	Code string
	// Message says what was wrong, naming the offending value.
	Message string
	kind    error
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

// newError builds an Error for a sentinel; used for checks done in Go
// before a round trip.
func newError(kind error, format string, args ...any) *Error {
	return &Error{Code: sentinelToCode[kind], Message: fmt.Sprintf(format, args...), kind: kind}
}

// NewError returns an Error of sentinel kind (one of the ErrXxx) with
// its code, wrapping cause (nil for none). Other backends of the
// interfaces in backend.go (pgmsgkafka) use it, so that their errors match
// the same sentinels and carry the same codes.
func NewError(kind, cause error, format string, args ...any) *Error {
	e := newError(kind, format, args...)
	e.cause = cause
	return e
}

// ErrorCode returns the stable code of err (PM001 ...), or "" if err has none.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// MapError converts an error of pgmsg's SQL API, called through a
// connection of the caller's own (for example pgmsg.publish inside an
// application's statement), into the library's *Error with its sentinel;
// other errors are returned unchanged. The library's methods do this
// themselves.
func MapError(err error) error { return mapError(err) }

// mapError is the one place database errors become pgmsg errors.
func mapError(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if kind, ok := codeToSentinel[pgErr.Code]; ok {
			return &Error{Code: pgErr.Code, Message: pgErr.Message, kind: kind, cause: err}
		}
		if isInputError(pgErr.Code) {
			return &Error{Code: sentinelToCode[ErrInvalidArgument], Message: "invalid argument: " + pgErr.Message,
				kind: ErrInvalidArgument, cause: err}
		}
	}
	return err
}

// isInputError reports whether a PostgreSQL SQLSTATE says the input was bad
// or too large rather than the database failing: a data exception (class
// 22: a value out of range, too long, malformed, with a NUL byte ...) or
// 54000 program_limit_exceeded (such as an index row too large). The
// checks of the SQL API should catch these first; they map to
// ErrInvalidArgument (PM004) so that no surface reports them as internal.
func isInputError(code string) bool {
	return strings.HasPrefix(code, sqlstateClassDataException) || code == sqlstateProgramLimitExceeded
}

const (
	sqlstateClassDataException   = "22"
	sqlstateProgramLimitExceeded = "54000"
)

// IsInputError reports whether err is a database error that says the input
// was bad or too large (see mapError): surfaces answer it as the caller's
// fault, never as an internal error.
func IsInputError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && isInputError(pgErr.Code)
}

// SQLSTATEs (PostgreSQL, Appendix A) of failures that may pass when tried
// again unchanged.
const sqlstateClassConnection = "08" // connection exception

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
// "not now" (backpressure: those answered with 429, ErrBackpressure and
// ErrQueueFull). Every other sentinel is the caller's to fix.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if s, ok := errors.AsType[*Sentinel](err); ok {
		return s.status == http.StatusTooManyRequests
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return retryableSQLState[pgErr.Code] || strings.HasPrefix(pgErr.Code, sqlstateClassConnection)
	}
	if errors.Is(err, pgx.ErrTxClosed) {
		return false
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || isConnError(err)
}

func isConnError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// isUndefinedTable reports an error that names a table that does not
// exist (42P01): a segment retention dropped, or that a replica has not
// replayed yet.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateUndefinedTable
}

const sqlstateUndefinedTable = "42P01"
