package pgmsg

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgmsg/pgmsg/internal/queue"
)

// Bounds of client-supplied values, checked in Go before a round trip and
// again by the SQL API (which refuses them with PM004) so that clients in
// other languages are held to them too.
const (
	// JobKindMaxBytes is the longest job kind, in bytes.
	JobKindMaxBytes = queue.KindMaxBytes
	// JobUniqueKeyMaxBytes is the longest job unique key, in bytes (the key
	// is held in an index row, which PostgreSQL limits to about 2,700 bytes).
	JobUniqueKeyMaxBytes = queue.UniqueKeyMaxBytes
	// SequenceKeyMaxBytes is the longest sequence key
	// (EnqueueParams.SequenceKey), in bytes.
	SequenceKeyMaxBytes = queue.SequenceKeyMaxBytes
	// LimitKeyMaxBytes is the longest limit key (EnqueueParams.LimitKey,
	// or the value of a queue's QueueConfig.KeyField), in bytes.
	LimitKeyMaxBytes = queue.LimitKeyMaxBytes
	// QueueKeyFieldMaxBytes is the longest QueueConfig.KeyField, in bytes.
	QueueKeyFieldMaxBytes = queue.KeyFieldMaxBytes
	// JobDependsOnMax is the most dependencies a job may have
	// (EnqueueParams.DependsOn and DependsOnNames together).
	JobDependsOnMax = queue.DependsOnMax
	// JobNameMaxBytes is the longest EnqueueParams.Name, in bytes.
	JobNameMaxBytes = queue.JobNameMaxBytes
	// TenantMaxBytes is the longest EnqueueParams.Tenant, in bytes.
	TenantMaxBytes = queue.TenantMaxBytes
	// TenantWeightMin and TenantWeightMax bound a tenant's weight
	// (SetTenantWeight).
	TenantWeightMin = queue.TenantWeightMin
	TenantWeightMax = queue.TenantWeightMax
)

// durationMax is the longest lease, session timeout, retry backoff or wait
// the SQL API accepts (PM004 past it). Go does not check it:
// the direct claim statements (internal/logread's direct.go, internal/queue's
// claim.go), which do not, leave longer leases to claim_range() and
// job_claim() to refuse. The queue engine gets it from newQueues.
const durationMax = 366 * 24 * time.Hour

// timeMin and timeMax bound the timestamps a client may give (record
// timestamps, job run times): the UTC years 0001 to 9999, the range that
// RFC 3339, JSON and most languages' time types can represent. PostgreSQL
// stores later years, which then could not be read back over HTTP.
var (
	timeMin = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	timeMax = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// checkTime refuses a timestamp outside timeMin..timeMax with
// ErrInvalidArgument. PostgreSQL keeps microseconds (the time is sent
// truncated to them): a time in the last microsecond of 9999 is stored
// within it, and is accepted.
func checkTime(what string, t time.Time) error {
	if t.Before(timeMin) || t.Truncate(time.Microsecond).After(timeMax) {
		return newError(ErrInvalidArgument, "%s %s is outside the UTC years 0001 to 9999", what, t.Format(time.RFC3339Nano))
	}
	return nil
}

// sendableNames refuses, with ValidateName's ErrInvalidName, a name that
// PostgreSQL cannot receive as text (a NUL byte, or not UTF-8): the server
// would refuse it as ErrInvalidArgument (22021) before the SQL API's check
// of names (PM003) runs. Every other bad name is the SQL API's to refuse.
// kindNames alternates kinds and names, as ValidateName takes them.
func sendableNames(kindNames ...string) error {
	for i := 0; i+1 < len(kindNames); i += 2 {
		if n := kindNames[i+1]; strings.IndexByte(n, 0) >= 0 || !utf8.ValidString(n) {
			return ValidateName(kindNames[i], n)
		}
	}
	return nil
}

// limit32 converts a count or limit for an integer parameter of the SQL API
// without wrapping around: values above 1<<30 become 1<<30 (a cap no
// caller reaches) and negative ones stay negative, for the SQL API to refuse.
func limit32(v int) int32 {
	return int32(max(min(v, 1<<30), math.MinInt32))
}
