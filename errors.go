package pgmsg

import (
	"errors"
	"fmt"
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
	ErrUnknownTopic = errors.New("unknown topic")
	// ErrTopicExists is returned by CreateTopic when the name is taken (PM002).
	ErrTopicExists = errors.New("topic already exists")
	// ErrInvalidName is returned for a topic or group name that is not 1-200
	// letters, digits, '.', '_' or '-' (PM003).
	ErrInvalidName = errors.New("invalid name")
	// ErrInvalidArgument is returned for an argument out of its range, such as
	// partitions outside 1..1024 or a non-positive lease (PM004).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrPartitionOutOfRange is returned when a partition number is not one
	// of the topic's (PM005).
	ErrPartitionOutOfRange = errors.New("partition out of range")
	// ErrRecordTooLarge is returned when a record's key, value and headers
	// exceed the topic's max_record_bytes (PM006). Nothing of the batch is written.
	ErrRecordTooLarge = errors.New("record too large")
	// ErrUnknownGroup is returned when a consumer group does not exist on the
	// topic (PM007).
	ErrUnknownGroup = errors.New("unknown consumer group")
	// ErrClaimExpired is returned by Commit, Release and Extend when the
	// claim's lease ran out (PM008); its records will be delivered again.
	ErrClaimExpired = errors.New("claim expired")
	// ErrClaimNotHeld is returned by Commit, Release and Extend when the claim
	// was already committed or released, the group was reset, or another
	// member claimed the partition after the lease ran out (PM009).
	ErrClaimNotHeld = errors.New("claim not held")
	// ErrEmptyBatch is returned when a publish has no records (PM010).
	ErrEmptyBatch = errors.New("empty batch")
	// ErrInvalidOffset is returned for a negative offset, an unparseable
	// position or a commit offset outside the claim (PM011).
	ErrInvalidOffset = errors.New("invalid offset")
	// ErrNotAssigned is returned when a group member claims a partition that
	// is not assigned to it (PM012): another member owns it now.
	ErrNotAssigned = errors.New("partition not assigned to member")
	// ErrNotMember is returned when a member claims after leaving the group
	// or after its session expired (PM013); it must heartbeat to rejoin.
	ErrNotMember = errors.New("not a member of the group")
	// ErrBackpressure is returned by publishes to a topic whose slowest
	// group is too far behind (PM014): the publish would put a partition
	// more than the topic's max_lag_records records, or max_lag_bytes bytes
	// of keys and values, ahead of it. Publish and the Producer first retry
	// for up to the topic's backpressure_timeout_ms (default 5000; 0 fails
	// at once); PublishTx fails at once. Nothing was written.
	ErrBackpressure = errors.New("backpressure")
	// ErrClosed is returned by a Producer or Consumer used after Close.
	ErrClosed = errors.New("closed")
)

var codeToSentinel = map[string]error{
	"PM001": ErrUnknownTopic,
	"PM002": ErrTopicExists,
	"PM003": ErrInvalidName,
	"PM004": ErrInvalidArgument,
	"PM005": ErrPartitionOutOfRange,
	"PM006": ErrRecordTooLarge,
	"PM007": ErrUnknownGroup,
	"PM008": ErrClaimExpired,
	"PM009": ErrClaimNotHeld,
	"PM010": ErrEmptyBatch,
	"PM011": ErrInvalidOffset,
	"PM012": ErrNotAssigned,
	"PM013": ErrNotMember,
	"PM014": ErrBackpressure,
}

var sentinelToCode = func() map[error]string {
	m := make(map[error]string, len(codeToSentinel))
	for c, e := range codeToSentinel {
		m[e] = c
	}
	return m
}()

// registerCode adds a code raised by the SQL API and its sentinel; features
// in other files (the queue) register theirs from init.
func registerCode(code string, sentinel error) {
	if _, dup := codeToSentinel[code]; dup {
		panic("pgmsg: duplicate error code " + code)
	}
	codeToSentinel[code] = sentinel
	sentinelToCode[sentinel] = code
}

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

// ErrorCode returns the stable code of err (PM001 ...), or "" if err has none.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

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
	return strings.HasPrefix(code, "22") || code == "54000"
}

// IsRetryable reports whether an operation that failed with err may succeed
// if tried again unchanged: connection loss, serialization failures,
// deadlocks and lock or statement timeouts, and backpressure
// (ErrBackpressure, ErrQueueFull). Input errors are never retryable.
func IsRetryable(err error) bool {
	if errors.Is(err, ErrBackpressure) || errors.Is(err, ErrQueueFull) {
		return true
	}
	if err == nil || ErrorCode(err) != "" {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03", "57014", "57P01", "57P02", "57P03", "53300":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
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
