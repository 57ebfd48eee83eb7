package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// headerCarrier carries trace context in a record's headers.
type headerCarrier struct{ r *pgmsgtype.Record }

func (h headerCarrier) Get(key string) string { return string(h.r.Headers[key]) }

func (h headerCarrier) Set(key, value string) {
	if h.r.Headers == nil {
		h.r.Headers = map[string][]byte{}
	}
	h.r.Headers[key] = []byte(value)
}

func (h headerCarrier) Keys() []string {
	out := make([]string, 0, len(h.r.Headers))
	for k := range h.r.Headers {
		out = append(out, k)
	}
	return out
}

// StartPublish starts the span of publishing records of topic and puts
// its context in every record without one. end records the outcome.
func (t *Tracer) StartPublish(ctx context.Context, topic string, records []*pgmsgtype.Record) (end func(error)) {
	if t == nil {
		return noEnd
	}
	ctx, span := t.t.Start(ctx, "publish "+topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "pgmsg"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", topic),
			attribute.Int("messaging.batch.message_count", len(records)),
		))
	for _, r := range records {
		if _, ok := r.Headers[TraceparentHeader]; !ok {
			traceContext.Inject(ctx, headerCarrier{r})
		}
	}
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if len(records) > 0 {
			span.SetAttributes(attribute.String("messaging.destination.partition.id", strconv.Itoa(int(records[0].Partition))),
				attribute.Int64("messaging.pgmsg.first_offset", records[0].Offset))
		}
		span.End()
	}
}

// StartProcess starts the span of handling cl, linked to the trace
// context its records carry (at most 128 distinct ones).
func (t *Tracer) StartProcess(ctx context.Context, cl *pgmsgtype.Claim) (context.Context, func(error)) {
	if t == nil {
		return ctx, noEnd
	}
	var links []trace.Link
	seen := map[trace.SpanID]bool{}
	for _, r := range cl.Records {
		if _, ok := r.Headers[TraceparentHeader]; !ok {
			continue
		}
		sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), headerCarrier{r}))
		if !sc.IsValid() || seen[sc.SpanID()] {
			continue
		}
		seen[sc.SpanID()] = true
		links = append(links, trace.Link{SpanContext: sc})
		if len(links) == 128 {
			break
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "pgmsg"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", cl.Topic),
		attribute.String("messaging.consumer.group.name", cl.Group),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(cl.Partition))),
		attribute.Int("messaging.batch.message_count", len(cl.Records)),
		attribute.Int64("messaging.pgmsg.claim_epoch", cl.Epoch),
	}
	if n := len(cl.Records); n > 0 {
		attrs = append(attrs, attribute.Int64("messaging.pgmsg.first_offset", cl.Records[0].Offset),
			attribute.Int64("messaging.pgmsg.last_offset", cl.Records[n-1].Offset))
	}
	ctx, span := t.t.Start(ctx, "process "+cl.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	return ctx, ender(span, func(err error) string { return fmt.Sprint(err) })
}

// Claim records a claim call that began at start: a "receive" span when
// it returned records or failed, a "commit" span when it only carried the
// commit of an earlier claim, nothing for an empty poll.
func (t *Tracer) Claim(ctx context.Context, start time.Time, topic, group string, commit, cl *pgmsgtype.Claim, err error) {
	if t == nil || (err == nil && cl == nil && commit == nil) || errors.Is(err, context.Canceled) {
		return // nothing happened, or the caller went away (shutdown)
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "pgmsg"),
		attribute.String("messaging.destination.name", topic),
		attribute.String("messaging.consumer.group.name", group),
	}
	name, op := "receive "+topic, "receive"
	if err == nil && cl == nil {
		name, op = "commit "+topic, "settle"
	}
	attrs = append(attrs, attribute.String("messaging.operation.type", op))
	if commit != nil {
		attrs = append(attrs, attribute.Int64("messaging.pgmsg.committed_epoch", commit.Epoch),
			attribute.String("messaging.pgmsg.committed_partition", strconv.Itoa(int(commit.Partition))))
	}
	if cl != nil && len(cl.Records) > 0 {
		attrs = append(attrs,
			attribute.String("messaging.destination.partition.id", strconv.Itoa(int(cl.Partition))),
			attribute.Int("messaging.batch.message_count", len(cl.Records)),
			attribute.Int64("messaging.pgmsg.claim_epoch", cl.Epoch),
			attribute.Int64("messaging.pgmsg.first_offset", cl.Records[0].Offset),
			attribute.Int64("messaging.pgmsg.last_offset", cl.Records[len(cl.Records)-1].Offset))
	}
	_, span := t.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// StartSettle starts the span of committing or releasing cl (verb
// "commit" or "release"); end records the outcome.
func (t *Tracer) StartSettle(ctx context.Context, verb string, cl *pgmsgtype.Claim) (end func(error)) {
	if t == nil {
		return noEnd
	}
	_, span := t.t.Start(ctx, verb+" "+cl.Topic, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("messaging.system", "pgmsg"),
			attribute.String("messaging.operation.type", "settle"),
			attribute.String("messaging.destination.name", cl.Topic),
			attribute.String("messaging.consumer.group.name", cl.Group),
			attribute.String("messaging.destination.partition.id", strconv.Itoa(int(cl.Partition))),
			attribute.Int64("messaging.pgmsg.claim_epoch", cl.Epoch),
		))
	return ender(span, errorText)
}
