package mirror

import "errors"

// Error is a condition of the mirror that the operator must act on, with a
// stable code (MR001 ...) so scripts can tell them apart. The pgmsg
// library's own errors (an unknown topic, PM001 ...) pass through as they
// are.
type Error struct {
	// Code is the stable code of the condition (the sentinel's).
	Code    string
	Message string
	kind    error
}

func (e *Error) Error() string { return e.Message + " [" + e.Code + "]" }

// Unwrap returns the sentinel, for errors.Is.
func (e *Error) Unwrap() error { return e.kind }

// Sentinels of the mirror, matched with errors.Is.
var (
	// ErrKafkaTopicMissing (MR001): a mirrored topic does not exist in
	// Kafka and the mirror was not asked to create it (--create-topics).
	ErrKafkaTopicMissing = errors.New("kafka topic missing")
	// ErrKafkaPartitions (MR002): a Kafka topic has fewer partitions than
	// its pgmsg topic, so partition numbers could not be kept.
	ErrKafkaPartitions = errors.New("kafka topic has fewer partitions")
	// ErrNotMirrored (MR003): a pgmsg group stands past what the mirror
	// has copied to Kafka; its position has no Kafka offset yet (run the
	// mirror until its lag is 0, then translate the group).
	ErrNotMirrored = errors.New("group position not mirrored yet")
	// ErrBadMirrorHeader (MR004): a Kafka record carries a pgmsg-offset
	// header that is not a decimal offset.
	ErrBadMirrorHeader = errors.New("bad pgmsg-offset header")
	// ErrTruncatedHistory (MR005): Kafka holds records the mirror copied
	// from a history of a pgmsg partition that a failover of PostgreSQL
	// lost (asynchronous replication): their pgmsg offsets now name other
	// records, which the mirror would otherwise skip as copied.
	ErrTruncatedHistory = errors.New("kafka holds records of a truncated pgmsg history")
	// ErrKafkaRefused (MR006): Kafka refuses the mirror's credentials or
	// their rights (a failed SASL authentication, a topic the principal
	// may not write or read): retrying cannot help, so the mirror stops.
	ErrKafkaRefused = errors.New("kafka refuses the mirror")
)

var codes = map[error]string{
	ErrKafkaTopicMissing: "MR001",
	ErrKafkaPartitions:   "MR002",
	ErrNotMirrored:       "MR003",
	ErrBadMirrorHeader:   "MR004",
	ErrTruncatedHistory:  "MR005",
	ErrKafkaRefused:      "MR006",
}

func newError(kind error, msg string) *Error {
	return &Error{Code: codes[kind], Message: msg, kind: kind}
}
