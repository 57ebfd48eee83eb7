package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// jobTraceKeys are the metadata keys that carry a job's trace context.
var jobTraceKeys = []string{TraceparentHeader, "tracestate"}

// JobCarrier is the trace context a job carries, as its metadata's
// traceparent and tracestate (st may be empty) hold it.
func JobCarrier(parent, st string) propagation.MapCarrier {
	m := propagation.MapCarrier{TraceparentHeader: parent}
	if st != "" {
		m["tracestate"] = st
	}
	return m
}

// StartEnqueue starts the span of enqueueing params to queue and returns
// params with the span's trace context in each job's metadata (a copy:
// the caller's slice is not changed). end records the outcome.
func (t *Tracer) StartEnqueue(ctx context.Context, queue string, params []pgmsgtype.EnqueueParams) ([]pgmsgtype.EnqueueParams, func(error)) {
	if t == nil {
		return params, noEnd
	}
	ctx, span := t.t.Start(ctx, "publish "+queue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "pgmsg"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", queue),
			attribute.Int("messaging.batch.message_count", len(params)),
		))
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	out := make([]pgmsgtype.EnqueueParams, len(params))
	copy(out, params)
	for i := range out {
		out[i].Metadata = withTraceContext(out[i].Metadata, carrier)
	}
	return out, ender(span, errorText)
}

// withTraceContext adds carrier's keys to the JSON object md unless it has
// a traceparent already. md that is not a JSON object is returned as it
// is, for the enqueue to refuse.
func withTraceContext(md json.RawMessage, carrier propagation.MapCarrier) json.RawMessage {
	if len(carrier) == 0 {
		return md
	}
	m := map[string]json.RawMessage{}
	if t := bytes.TrimSpace(md); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &m); err != nil || m == nil {
			return md
		}
	}
	if _, ok := m[TraceparentHeader]; ok {
		return md
	}
	for _, k := range jobTraceKeys {
		if v := carrier.Get(k); v != "" {
			m[k], _ = json.Marshal(v)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return md
	}
	return out
}

// JobClaim records a worker's claim call that began at start: a "receive"
// span when it returned jobs or failed, nothing for an empty poll or a
// shutdown.
func (t *Tracer) JobClaim(ctx context.Context, start time.Time, queue string, jobs []*pgmsgtype.Job, err error) {
	if t == nil || (err == nil && len(jobs) == 0) || errors.Is(err, context.Canceled) {
		return
	}
	_, span := t.t.Start(ctx, "receive "+queue, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.String("messaging.system", "pgmsg"),
			attribute.String("messaging.operation.type", "receive"),
			attribute.String("messaging.destination.name", queue),
			attribute.Int("messaging.batch.message_count", len(jobs)),
		))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// StartJobProcess starts the span of handling job: a child of the trace
// context the job carries (carrier, which may be nil), else of ctx's. The
// returned context carries it; end records the handler's outcome.
func (t *Tracer) StartJobProcess(ctx context.Context, job *pgmsgtype.Job, carrier propagation.MapCarrier) (context.Context, func(error)) {
	if t == nil {
		return ctx, noEnd
	}
	parent := ctx
	if carrier != nil {
		if sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier)); sc.IsValid() {
			parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "pgmsg"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", job.Queue),
		attribute.String("messaging.message.id", strconv.FormatInt(job.ID, 10)),
		attribute.Int("messaging.pgmsg.attempt", job.Attempt),
	}
	if job.Kind != "" {
		attrs = append(attrs, attribute.String("messaging.pgmsg.kind", job.Kind))
	}
	ctx, span := t.t.Start(parent, "process "+job.Queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx, ender(span, func(err error) string { return fmt.Sprint(err) })
}

// StartJobSettle starts the span of completing n jobs of queue.
func (t *Tracer) StartJobSettle(ctx context.Context, queue string, n int) func(error) {
	if t == nil {
		return noEnd
	}
	_, span := t.t.Start(ctx, "complete "+queue, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("messaging.system", "pgmsg"),
			attribute.String("messaging.operation.type", "settle"),
			attribute.String("messaging.destination.name", queue),
			attribute.Int("messaging.batch.message_count", n),
		))
	return ender(span, errorText)
}
