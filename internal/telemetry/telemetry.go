// Package telemetry is pgmsg's OpenTelemetry tracing: the tracer of a
// Client (nil when Config.TracerProvider is not set) and the spans every
// engine opens around its own calls, with the trace context records carry
// in their headers and jobs in their metadata. The engines
// (internal/logread, internal/logpublish, internal/logconsumer,
// internal/producer, internal/queue, internal/worker) get a *Tracer when
// they are made and call it themselves; the root only builds it
// (pgmsg.NewClient).
//
// The spans of the log (log.go):
//
//   - Publish makes a "publish TOPIC" span (kind producer) per call, and
//     the Producer one per record, from the caller's context; each record
//     gets the span's W3C trace context in its "traceparent" header (and
//     "tracestate" when there is one) unless it has a traceparent already.
//   - Consumer.Run and Consumer.Poll's caller see a "process TOPIC" span
//     (kind consumer) around the handler of each claim, linked to the
//     trace context each record carries, so a trace shows which publish a
//     processed record came from. Its attributes name the group,
//     partition, claim epoch and offsets.
//   - A claim that returns records makes a "receive TOPIC" span (kind
//     client) over the claim's call; when a commit rode along, it says
//     which claim it committed. Commits, partial commits and releases on
//     their own, and a commit that rode on a claim that found nothing,
//     make "commit TOPIC" / "release TOPIC" spans (operation type
//     "settle"). Claims that find nothing make none: idle consumers poll;
//     nor do claims cut short by the caller's context (shutdown).
//
// The spans of the queue (job.go):
//
//   - EnqueueMany, Enqueue and their Tx forms make a "publish QUEUE" span
//     (kind producer) per call; each job whose Metadata has no
//     "traceparent" gets the span's W3C trace context there
//     ("traceparent", and "tracestate" when there is one). Metadata is a
//     JSON object, so the enqueue goes through enqueue_many() rather than
//     the direct statement.
//   - A Worker makes a "receive QUEUE" span (kind client) for each claim
//     that returns jobs, and a "process QUEUE" span (kind consumer) around
//     each handler call: a child of the trace context the job carries, so
//     one trace runs from the request that enqueued the job to its
//     handler, whose ctx carries the span. Completions the worker writes
//     make a "complete QUEUE" span (operation type "settle").
//
// The worker reads jobs' trace context with one statement per claim that
// returned jobs (claims do not carry metadata); without a TracerProvider
// nothing of this runs.
//
// Attribute names follow OpenTelemetry's messaging conventions
// (messaging.system "pgmsg").
package telemetry

import (
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of pgmsg's spans.
const TracerName = "github.com/pgmsg/pgmsg"

// TraceparentHeader is the W3C Trace Context header records carry (and
// the metadata key jobs carry it under).
const TraceparentHeader = "traceparent"

// Tracer opens pgmsg's spans. A nil *Tracer is tracing off: every method
// then does nothing (and costs no allocation).
type Tracer struct {
	t trace.Tracer
}

// New returns the tracer of tp, or nil (tracing off) when tp is nil.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{t: tp.Tracer(TracerName)}
}

// On reports whether tracing is on.
func (t *Tracer) On() bool { return t != nil }

var traceContext = propagation.TraceContext{}

// noEnd is the end of a span that was not started.
func noEnd(error) {}

// ender returns the end of span: the error, if any, is recorded and the
// span ended. msg formats the error's status description.
func ender(span trace.Span, msg func(error) string) func(error) {
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, msg(err))
		}
		span.End()
	}
}

func errorText(err error) string { return err.Error() }
