package pgmsg

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
)

// OpenTelemetry tracing of the queue (item 6), on when
// Config.TracerProvider is set, as the log's (tracing.go):
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

// jobTraceKeys are the metadata keys that carry a job's trace context.
var jobTraceKeys = []string{"traceparent", "tracestate"}

// startEnqueueSpan starts the span of enqueueing params to queue and
// returns params with the span's trace context in each job's metadata
// (a copy: the caller's slice is not changed). end records the outcome.
func (c *Client) startEnqueueSpan(ctx context.Context, queue string, params []EnqueueParams) ([]EnqueueParams, func(error)) {
	t := c.tracer()
	if t == nil {
		return params, func(error) {}
	}
	ctx, span := t.Start(ctx, "publish "+queue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "pgmsg"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", queue),
			attribute.Int("messaging.batch.message_count", len(params)),
		))
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	out := make([]EnqueueParams, len(params))
	copy(out, params)
	for i := range out {
		out[i].Metadata = withTraceContext(out[i].Metadata, carrier)
	}
	return out, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
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
	if _, ok := m["traceparent"]; ok {
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

// jobTraces reads the trace contexts that jobs carry in their metadata,
// by job id (when tracing is on; nil otherwise). A failure leaves jobs
// without one: tracing never fails a claim.
func (c *Client) jobTraces(ctx context.Context, jobs []*Job) map[int64]propagation.MapCarrier {
	if c.tracer() == nil || len(jobs) == 0 {
		return nil
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	out := make(map[int64]propagation.MapCarrier, len(jobs))
	_ = c.store.JobTraces(ctx, c.pool, ids, func(id int64, parent, st string) {
		m := propagation.MapCarrier{"traceparent": parent}
		if st != "" {
			m["tracestate"] = st
		}
		out[id] = m
	})
	return out
}

// traceJobClaim records a worker's claim call that began at start: a
// "receive" span when it returned jobs or failed, nothing for an empty
// poll or a shutdown.
func (c *Client) traceJobClaim(ctx context.Context, start time.Time, queue string, jobs []*Job, err error) {
	t := c.tracer()
	if t == nil || (err == nil && len(jobs) == 0) || errors.Is(err, context.Canceled) {
		return
	}
	_, span := t.Start(ctx, "receive "+queue, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
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

// startJobProcessSpan starts the span of handling job: a child of the
// trace context the job carries (carrier, from jobTraces), else of ctx's. The returned context
// carries it; end records the handler's outcome.
func (c *Client) startJobProcessSpan(ctx context.Context, job *Job, carrier propagation.MapCarrier) (context.Context, func(error)) {
	t := c.tracer()
	if t == nil {
		return ctx, func(error) {}
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
	ctx, span := t.Start(parent, "process "+job.Queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, fmt.Sprint(err))
		}
		span.End()
	}
}

// startJobSettleSpan starts the span of completing n jobs of queue.
func (c *Client) startJobSettleSpan(ctx context.Context, queue string, n int) func(error) {
	t := c.tracer()
	if t == nil {
		return func(error) {}
	}
	_, span := t.Start(ctx, "complete "+queue, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("messaging.system", "pgmsg"),
			attribute.String("messaging.operation.type", "settle"),
			attribute.String("messaging.destination.name", queue),
			attribute.Int("messaging.batch.message_count", n),
		))
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
