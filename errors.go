package pgmsg

import (
	"github.com/pgmsg/pgmsg/internal/errs"
)

// Sentinel errors. Every error pgmsg returns for bad input or a lost claim
// matches one of these with errors.Is; the underlying *pgconn.PgError (for
// errors raised by the SQL API) stays reachable with errors.As. Each has a
// stable code (Error.Code), the SQLSTATE the SQL API raises. They are
// declared, with their codes, names and HTTP statuses, in internal/errs,
// the one home of pgmsg's errors.
var (
	// ErrUnknownTopic is returned when a topic does not exist (PM001).
	ErrUnknownTopic error = errs.UnknownTopic
	// ErrTopicExists is returned by CreateTopic when the name is taken (PM002).
	ErrTopicExists error = errs.TopicExists
	// ErrInvalidName is returned for a topic or group name that is not 1-200
	// letters, digits, '.', '_' or '-' (PM003).
	ErrInvalidName error = errs.InvalidName
	// ErrInvalidArgument is returned for an argument out of its range, such as
	// partitions outside 1..1024 or a non-positive lease (PM004).
	ErrInvalidArgument error = errs.InvalidArgument
	// ErrPartitionOutOfRange is returned when a partition number is not one
	// of the topic's (PM005).
	ErrPartitionOutOfRange error = errs.PartitionOutOfRange
	// ErrRecordTooLarge is returned when a record's key, value and headers
	// exceed the topic's max_record_bytes (PM006). Nothing of the batch is written.
	ErrRecordTooLarge error = errs.RecordTooLarge
	// ErrUnknownGroup is returned when a consumer group does not exist on the
	// topic (PM007).
	ErrUnknownGroup error = errs.UnknownGroup
	// ErrClaimExpired is returned by Commit, Release and Extend when the
	// claim's lease ran out (PM008); its records will be delivered again.
	ErrClaimExpired error = errs.ClaimExpired
	// ErrClaimNotHeld is returned by Commit, Release and Extend when the claim
	// was already committed or released, the group was reset, or another
	// member claimed the partition after the lease ran out (PM009).
	ErrClaimNotHeld error = errs.ClaimNotHeld
	// ErrEmptyBatch is returned when a publish has no records (PM010).
	ErrEmptyBatch error = errs.EmptyBatch
	// ErrInvalidOffset is returned for a negative offset, an unparseable
	// position or a commit offset outside the claim (PM011).
	ErrInvalidOffset error = errs.InvalidOffset
	// ErrNotAssigned is returned when a group member claims a partition that
	// is not assigned to it (PM012): another member owns it now.
	ErrNotAssigned error = errs.NotAssigned
	// ErrNotMember is returned when a member claims after leaving the group
	// or after its session expired (PM013); it must heartbeat to rejoin.
	ErrNotMember error = errs.NotMember
	// ErrBackpressure is returned by publishes to a topic whose slowest
	// group is too far behind (PM014): the publish would put a partition
	// more than the topic's max_lag_records records, or max_lag_bytes bytes
	// of keys and values, ahead of it. Publish and the Producer first retry
	// for up to the topic's backpressure_timeout_ms (default 5000; 0 fails
	// at once); PublishTx fails at once. Nothing was written.
	ErrBackpressure error = errs.Backpressure
	// ErrOutOfOrderSequence is returned by an idempotent publish
	// (PublishIdempotent, a Producer with Idempotent set) whose sequence
	// numbers do not come after the producer's last stored batch on a
	// partition and are not that batch again (PM015): a reordered or
	// overlapping batch. Nothing was written.
	ErrOutOfOrderSequence error = errs.OutOfOrderSequence
	// ErrTopicNotEmpty is returned by DeleteEmptyTopic when the
	// topic still stores records or has consumer groups (PM017). Nothing
	// was deleted.
	ErrTopicNotEmpty error = errs.TopicNotEmpty
	// ErrLogTruncated is returned by a claim (Claim, Consumer.Poll and
	// Run, the HTTP API's claim) when the partition's log epoch changed
	// since this Client last claimed it for the group, and offsets the
	// Client had been given in the old epoch lie past that epoch's end on
	// the server (PM020): the server is a promoted standby that lacks
	// records the old primary had (asynchronous replication), and those
	// offsets now name other records. The claim was released and nothing
	// was handed over; the message names the offsets. The Client now
	// knows the new epoch, so the next claim goes on from the group's
	// cursor on the new primary (docs/reliability.md, "What a failover
	// does", says how to decide).
	ErrLogTruncated error = errs.LogTruncated
	// ErrDiskFull is returned when PostgreSQL could not write because a
	// volume is full (SQLSTATE 53100 disk_full, reported as PM021): the
	// statement was rolled back, nothing it wrote was kept (a publish or
	// enqueue stored nothing), and what is stored stays readable. Calls
	// succeed again once space is freed; it is retryable (IsRetryable), so
	// Producers, Consumers and Workers retry on their own.
	ErrDiskFull error = errs.DiskFull
	// ErrNotEnoughReplicas is returned for a write (publish, enqueue,
	// job completion or cancel, offset commit, idempotent producer state)
	// refused because the schema's min_insync_replicas is 2 and
	// PostgreSQL would commit it without waiting for a synchronous standby
	// (PM124), as Kafka's NOT_ENOUGH_REPLICAS with min.insync.replicas:
	// synchronous_standby_names is empty (an old primary that
	// pg_auto_failover put in wait_primary, say) or the session's
	// synchronous_commit is local or off. Nothing was written. It is
	// retryable (IsRetryable): it passes once a synchronous standby is
	// back. See SetMinInsyncReplicas and docs/operations.md.
	ErrNotEnoughReplicas error = errs.NotEnoughReplicas
	// ErrClosed is returned by a Producer or a Consumer used after Close.
	ErrClosed error = errs.Closed
	// ErrBufferFull is returned by a Producer with FailWhenFull whose
	// buffer holds MaxBufferedRecords records or MaxBufferedBytes bytes.
	// Nothing of the record was written; IsRetryable reports true.
	ErrBufferFull error = errs.BufferFull
	// ErrUnknownKind is the error of a job attempt that Kinds.Handle could
	// not route: no handler is registered for the job's kind.
	ErrUnknownKind error = errs.UnknownKind
)

// Sentinel is the type of pgmsg's sentinel errors. Each names one
// condition and carries everything a surface needs to report it: the
// stable code the SQL API raises as its SQLSTATE (PM001 ...; empty for a
// condition only the Go library reports), the name the HTTP API and the
// CLI's JSON output use (Name), and the HTTP status it is answered with
// (HTTPStatus). Match sentinels with errors.Is; errors.As with a *Sentinel
// finds the one an error carries.
type Sentinel = errs.Sentinel

// Sentinels returns every sentinel error of the library, in a stable order.
func Sentinels() []*Sentinel { return errs.Sentinels() }

// Error is an error with a stable code, returned for every condition that
// has a sentinel. It matches its sentinel with errors.Is and, when the SQL
// API raised it, wraps the *pgconn.PgError. Its fields are Code (PM001
// ...) and Message (what was wrong, naming the offending value).
type Error = errs.Error

// newError builds an Error for a sentinel; used for checks done in Go
// before a round trip.
func newError(kind error, format string, args ...any) *Error {
	return errs.New(kind.(*Sentinel), format, args...)
}

// NewError returns an Error of sentinel kind (one of the ErrXxx) with
// its code, wrapping cause (nil for none). Other backends of the
// interfaces in backend.go (pgmsgkafka) use it, so that their errors match
// the same sentinels and carry the same codes.
func NewError(kind, cause error, format string, args ...any) *Error {
	s, ok := kind.(*Sentinel)
	if !ok {
		panic("pgmsg.NewError: kind is not one of pgmsg's sentinels")
	}
	return errs.Wrap(s, cause, format, args...)
}

// ErrorCode returns the stable code of err (PM001 ...), or "" if err has none.
func ErrorCode(err error) string { return errs.Code(err) }

// MapError converts an error of pgmsg's SQL API, called through a
// connection of the caller's own (for example pgmsg.publish inside an
// application's statement), into the library's *Error with its sentinel;
// other errors are returned unchanged. The library's methods do this
// themselves.
func MapError(err error) error { return errs.Map(err) }

// IsInputError reports whether err is a database error that says the input
// was bad or too large: a data exception (SQLSTATE class 22) or
// program_limit_exceeded (54000), which the library maps to
// ErrInvalidArgument. Surfaces answer it as the caller's fault, never as an
// internal error.
func IsInputError(err error) bool { return errs.IsInput(err) }

// IsRetryable reports whether an operation that failed with err may succeed
// if tried again unchanged: connection loss, serialization failures,
// deadlocks and lock or statement timeouts, and the sentinels that say
// "not now" (backpressure: those answered with 429, ErrBackpressure and
// ErrQueueFull). Every other sentinel is the caller's to fix.
func IsRetryable(err error) bool { return errs.IsRetryable(err) }
