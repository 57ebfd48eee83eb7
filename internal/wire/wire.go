// Package wire holds the JSON shapes in which pgmsg's surfaces show
// records and jobs to people and programs: the HTTP API's answers and the
// CLI's output. The HTTP server and the CLI both render through it, so
// that `pgmsg consume` prints what GET /v1/consume answers.
package wire

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/pgmsg/pgmsg"
)

// MaxAnswerBytesDefault caps the stored bytes (record key+value, job
// payload) of one answer that hands out records or jobs: an HTTP consume
// or claim (pgmsg serve --max-answer-bytes), a batch of pgmsg consume or
// pgmsg queue work. 16 MiB.
const MaxAnswerBytesDefault = 16 << 20

// Value encodings: how a value travels in JSON.
const (
	// EncodingJSON: the value is any JSON document, stored as its compact text.
	EncodingJSON = "json"
	// EncodingText: the value is a JSON string, stored as its UTF-8 bytes.
	EncodingText = "text"
	// EncodingBase64: the value is a JSON string of standard base64, for binary.
	EncodingBase64 = "base64"
	// EncodingAuto (responses only): JSON if the stored bytes are JSON that
	// every parser accepts (valid UTF-8, no lone surrogate escape), else
	// text if they are UTF-8, else base64; each record says which.
	EncodingAuto = "auto"
)

// RecordJSON is a record as the API (and `pgmsg consume`) prints it.
type RecordJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Key is null when the record has none.
	Key         *string `json:"key"`
	KeyEncoding string  `json:"key_encoding,omitempty"`
	// Value is a JSON value, a string of text or a base64 string, as
	// ValueEncoding says; null without a ValueEncoding when the record has
	// none (null with ValueEncoding json is a value: the JSON text null).
	Value           json.RawMessage   `json:"value"`
	ValueEncoding   string            `json:"value_encoding,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	HeadersEncoding string            `json:"headers_encoding,omitempty"`
	Timestamp       time.Time         `json:"timestamp"`
}

// EncodeRecord renders r with its value in enc (json, text, base64 or
// auto). A value that is not valid in enc (not JSON, not UTF-8) falls back
// to base64; keys and headers are text unless they are not UTF-8. The
// encoding of every key, header and value there is is set.
func EncodeRecord(r *pgmsg.Record, enc string) RecordJSON {
	out := RecordJSON{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC()}
	if r.Key != nil {
		k, e := textOrBase64(r.Key)
		out.Key, out.KeyEncoding = &k, e
	}
	out.Value, out.ValueEncoding = EncodeValue(r.Value, enc)
	if len(r.Headers) > 0 {
		out.Headers = make(map[string]string, len(r.Headers))
		out.HeadersEncoding = EncodingText
		for _, v := range r.Headers {
			if !utf8.Valid(v) {
				out.HeadersEncoding = EncodingBase64
			}
		}
		for k, v := range r.Headers {
			if out.HeadersEncoding == EncodingBase64 {
				out.Headers[k] = base64.StdEncoding.EncodeToString(v)
			} else {
				out.Headers[k] = string(v)
			}
		}
	}
	return out
}

func textOrBase64(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), EncodingText
	}
	return base64.StdEncoding.EncodeToString(b), EncodingBase64
}

// EncodeValue renders stored bytes in enc and says which encoding it used.
// No value (nil) is null with no encoding, so that it cannot be taken for
// a value holding the JSON text null, which is null with encoding json.
func EncodeValue(v []byte, enc string) (json.RawMessage, string) {
	if v == nil {
		return json.RawMessage("null"), ""
	}
	asString := func(s string) json.RawMessage {
		b, _ := json.Marshal(s)
		return b
	}
	switch enc {
	case EncodingJSON:
		if portableJSON(v) {
			return json.RawMessage(v), EncodingJSON
		}
	case EncodingText:
		if utf8.Valid(v) {
			return asString(string(v)), EncodingText
		}
	case EncodingAuto, "":
		if portableJSON(v) {
			return json.RawMessage(v), EncodingJSON
		}
		if utf8.Valid(v) {
			return asString(string(v)), EncodingText
		}
	}
	return asString(base64.StdEncoding.EncodeToString(v)), EncodingBase64
}

// portableJSON reports whether v can be embedded as is in a JSON answer that
// every parser accepts: valid JSON, valid UTF-8 (json.Valid alone lets bytes
// such as 0xff through inside strings), and no \u escape of a lone
// surrogate (which serde, for one, refuses). Values written through the
// Go library or SQL are arbitrary bytes, so this is checked per value.
func portableJSON(v []byte) bool {
	return utf8.Valid(v) && json.Valid(v) && !hasLoneSurrogate(v)
}

// hasLoneSurrogate reports whether valid JSON v holds a \u escape of a
// UTF-16 surrogate that is not a high surrogate followed by a low one.
// Backslashes only occur in strings of valid JSON, as escapes.
func hasLoneSurrogate(v []byte) bool {
	hex4 := func(i int) rune {
		if i+6 > len(v) || v[i] != '\\' || v[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(string(v[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(n)
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		if v[i+1] != 'u' {
			i++ // a two-byte escape such as \\ or \"
			continue
		}
		r := hex4(i)
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if lo := hex4(i + 6); lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		default:
			i += 5
		}
	}
	return false
}

// JobJSON is a claimed or listed job; Payload is encoded as
// PayloadEncoding says (like record values): null without PayloadEncoding
// for none.
type JobJSON struct {
	ID              int64           `json:"id"`
	Queue           string          `json:"queue"`
	State           pgmsg.JobState  `json:"state"`
	Kind            string          `json:"kind,omitempty"`
	Payload         json.RawMessage `json:"payload"`
	PayloadEncoding string          `json:"payload_encoding,omitempty"`
	Priority        int             `json:"priority"`
	Attempt         int             `json:"attempt"`
	MaxAttempts     int             `json:"max_attempts"`
	LeaseToken      int64           `json:"lease_token,omitempty"`
	LeaseExpiresAt  *time.Time      `json:"lease_expires_at,omitempty"`
	RunAt           *time.Time      `json:"run_at,omitempty"`
	EnqueuedAt      time.Time       `json:"enqueued_at"`
	// AttemptedAt is when the job's latest attempt started; Worker who
	// ran it (ClaimJobsOpts.Worker, the HTTP claim's worker). Absent:
	// never attempted; no worker named, or archived (the archive keeps
	// no worker).
	AttemptedAt *time.Time       `json:"attempted_at,omitempty"`
	Worker      string           `json:"worker,omitempty"`
	FinishedAt  *time.Time       `json:"finished_at,omitempty"`
	UniqueKey   string           `json:"unique_key,omitempty"`
	Errors      []pgmsg.JobError `json:"errors,omitempty"`
	// Timeout is the job's maximum run time ("1m30s"), its own or its
	// queue's; absent: none.
	Timeout string `json:"timeout,omitempty"`
	// Progress is what the job's handler last recorded (JSON); absent:
	// none, or not returned by this call (claims and dead-job lists).
	Progress json.RawMessage `json:"progress,omitempty"`
	// Result is a completed job's result (JSON); absent: none.
	Result json.RawMessage `json:"result,omitempty"`
	// Tags and Metadata are the job's own; absent: none, or not returned
	// by this call (claims).
	Tags     []string        `json:"tags,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// DependsOn are the jobs the job waits for, or waited for;
	// DepsWaiting how many of them it still waits for (pending);
	// WorkflowID its workflow. Absent: none, or not returned by this call
	// (only a job's own answer has them).
	DependsOn   []int64 `json:"depends_on,omitempty"`
	DepsWaiting int     `json:"deps_waiting,omitempty"`
	WorkflowID  int64   `json:"workflow_id,omitempty"`
	// SequenceKey and LimitKey are the job's sequence and per-key limit
	// keys; absent: none, or not returned by this call (claims). An
	// archived job keeps no limit key.
	SequenceKey string `json:"sequence_key,omitempty"`
	LimitKey    string `json:"limit_key,omitempty"`
	// BatchID is the batch the job was enqueued in; absent: none, or not
	// returned by this call (claims).
	BatchID int64 `json:"batch_id,omitempty"`
}

// EncodeJob renders a job with its payload in enc (auto, json, text, base64).
func EncodeJob(j *pgmsg.Job, enc string) JobJSON {
	out := JobJSON{ID: j.ID, Queue: j.Queue, State: j.State, Kind: j.Kind, Priority: j.Priority, Attempt: j.Attempt,
		MaxAttempts: j.MaxAttempts, LeaseToken: j.LeaseToken, LeaseExpiresAt: UTCPtr(j.LeaseExpiresAt), RunAt: UTCPtr(j.RunAt),
		EnqueuedAt: j.EnqueuedAt.UTC(), AttemptedAt: UTCPtr(j.AttemptedAt), Worker: j.Worker, FinishedAt: UTCPtr(j.FinishedAt), UniqueKey: j.UniqueKey, Errors: j.Errors,
		Progress: j.Progress, Result: j.Result, Tags: j.Tags, Metadata: j.Metadata, DependsOn: j.DependsOn,
		DepsWaiting: j.DepsWaiting, WorkflowID: j.WorkflowID, SequenceKey: j.SequenceKey, LimitKey: j.LimitKey,
		BatchID: j.BatchID}
	if j.Timeout > 0 {
		out.Timeout = j.Timeout.String()
	}
	out.Payload, out.PayloadEncoding = EncodeValue(j.Payload, enc)
	return out
}

// EncodeJobs renders jobs as EncodeJob does, for the answers that list them.
func EncodeJobs(jobs []*pgmsg.Job, enc string) []JobJSON {
	out := make([]JobJSON, len(jobs))
	for i, j := range jobs {
		out[i] = EncodeJob(j, enc)
	}
	return out
}

// UTCPtr is t in UTC. Answers give times in UTC: pgx and the client
// return them in the process's zone, in which a valid time near the ends
// of the UTC years 0001..9999 (a record timestamp 9999-12-31T23:59:59Z,
// east of Greenwich) falls outside them and cannot be encoded (a 500).
func UTCPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// DeadLetterJSON is a record a consumer group set aside: where it came
// from, why, and the dead letter itself (in the dead-letter topic, with
// the source record's key, value, timestamp and headers).
type DeadLetterJSON struct {
	Topic      string     `json:"topic"`
	Partition  int32      `json:"partition"`
	Offset     int64      `json:"offset"`
	Group      string     `json:"group"`
	Error      string     `json:"error"`
	Deliveries int        `json:"deliveries"`
	Replayed   bool       `json:"replayed"`
	DeadLetter RecordJSON `json:"dead_letter"`
}

// EncodeDeadLetter renders d with its value in enc, as EncodeRecord.
func EncodeDeadLetter(d *pgmsg.DeadLetter, enc string) DeadLetterJSON {
	return DeadLetterJSON{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset, Group: d.Group, Error: d.Error,
		Deliveries: d.Deliveries, Replayed: d.Replayed, DeadLetter: EncodeRecord(d.Record, enc)}
}

// PeriodicJobJSON is a periodic job (pgmsg.PeriodicJob) with its payload
// encoded as a job's, and durations as text ("1m30s").
type PeriodicJobJSON struct {
	Queue           string          `json:"queue"`
	Name            string          `json:"name"`
	Schedule        string          `json:"schedule"`
	TimeZone        string          `json:"time_zone"`
	Kind            string          `json:"kind,omitempty"`
	Payload         json.RawMessage `json:"payload"`
	PayloadEncoding string          `json:"payload_encoding,omitempty"`
	Priority        int             `json:"priority"`
	MaxAttempts     int             `json:"max_attempts,omitempty"`
	Timeout         string          `json:"timeout,omitempty"`
	Tags            []string        `json:"tags,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
	RunOnStart      bool            `json:"run_on_start"`
	DefinedAt       time.Time       `json:"defined_at"`
	NextRunAt       time.Time       `json:"next_run_at"`
	LastRunAt       *time.Time      `json:"last_run_at,omitempty"`
	LastJobID       int64           `json:"last_job_id,omitempty"`
	LastError       string          `json:"last_error,omitempty"`
}

// EncodePeriodicJob renders p with its payload in enc (auto, json, text,
// base64).
func EncodePeriodicJob(p *pgmsg.PeriodicJob, enc string) PeriodicJobJSON {
	out := PeriodicJobJSON{Queue: p.Queue, Name: p.Name, Schedule: p.Schedule, TimeZone: p.TimeZone, Kind: p.Kind,
		Priority: p.Priority, MaxAttempts: p.MaxAttempts, Tags: p.Tags, Metadata: p.Metadata, RunOnStart: p.RunOnStart,
		DefinedAt: p.DefinedAt.UTC(), NextRunAt: p.NextRunAt.UTC(), LastJobID: p.LastJobID, LastError: p.LastError}
	if p.Timeout > 0 {
		out.Timeout = p.Timeout.String()
	}
	if !p.LastRunAt.IsZero() {
		out.LastRunAt = UTCPtr(&p.LastRunAt)
	}
	out.Payload, out.PayloadEncoding = EncodeValue(p.Payload, enc)
	return out
}

// ParseTime reads a time given as an argument (what names it, as the user
// wrote it: "--since", "time") for the CLI and the HTTP API alike, by the
// rule the SQL API's positions follow (_position in functions/log.sql):
// RFC 3339 with a zone, with or without fractions ("T" or a space between
// date and time), or a duration ago in h, m, s and ms ("90m", "1h30m").
func ParseTime(what, v string) (time.Time, error) {
	if rfc3339.MatchString(v) {
		if t, err := time.Parse(time.RFC3339Nano, v[:10]+"T"+v[11:]); err == nil {
			return t, nil
		}
	} else if durationAgo.MatchString(v) {
		if d, err := time.ParseDuration(v); err == nil {
			return time.Now().Add(-d), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s must be an RFC 3339 time (2026-12-01T10:00:00Z) or a duration ago (90m, 1h30m), got %q", what, v)
}

var (
	rfc3339     = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$`)
	durationAgo = regexp.MustCompile(`^([0-9]{1,9}(\.[0-9]{1,9})?(h|m|s|ms))+$`)
)
