package pgmsg_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgmsg/pgmsg"
)

// With a TracerProvider, a publish makes a producer span whose context
// travels in each record's traceparent header, and the consumer's process
// span links to it; without one, no header is added.
func TestTracing(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tb := setup(t, &pgmsg.Config{TracerProvider: tp})
	tb.topic(t, "traced", 1)

	ctx, parent := tp.Tracer("test").Start(tb.ctx, "request")
	recs := []*pgmsg.Record{{Topic: "traced", Value: []byte("a")}, {Topic: "traced", Value: []byte("b")}}
	require.NoError(t, tb.client.Publish(ctx, recs, nil))
	p, err := tb.client.NewProducer(nil)
	require.NoError(t, err)
	require.NoError(t, p.ProduceSync(ctx, &pgmsg.Record{Topic: "traced", Value: []byte("c")}))
	require.NoError(t, p.Close(tb.ctx))
	parent.End()

	var publishes []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "publish traced" {
			publishes = append(publishes, s)
			require.Equal(t, trace.SpanKindProducer, s.SpanKind())
			require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the caller's span")
		}
	}
	require.Len(t, publishes, 2, "one for Publish, one for the produced record")
	for _, r := range recs {
		require.Contains(t, string(r.Headers["traceparent"]), publishes[0].SpanContext().SpanID().String())
	}

	cn, err := tb.client.NewConsumer("traced", "g", &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: 10}})
	require.NoError(t, err)
	t.Cleanup(cn.Close)
	rctx, cancel := context.WithCancel(tb.ctx)
	got := 0
	var handlerSpan trace.SpanContext
	runErr := make(chan error, 1)
	go func() {
		runErr <- cn.Run(rctx, func(ctx context.Context, cl *pgmsg.Claim) error {
			handlerSpan = trace.SpanContextFromContext(ctx)
			for _, r := range cl.Records {
				require.NotEmpty(t, r.Headers["traceparent"], "the header is stored and read back")
			}
			got += len(cl.Records)
			if got >= 3 {
				cancel()
			}
			return nil
		})
	}()
	select {
	case err := <-runErr:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("the records were not consumed")
	}
	require.Equal(t, 3, got)
	var process []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "process traced" {
			process = append(process, s)
		}
	}
	require.NotEmpty(t, process)
	linked := map[trace.SpanID]bool{}
	for _, s := range process {
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		for _, l := range s.Links() {
			linked[l.SpanContext.SpanID()] = true
		}
	}
	for _, s := range publishes {
		require.True(t, linked[s.SpanContext().SpanID()], "a process span links to publish span %s", s.SpanContext().SpanID())
	}
	require.True(t, handlerSpan.IsValid(), "the handler runs inside the process span")

	// The claims that returned records made receive spans; the last
	// claim's commit (on Run's way out, or riding on a claim that found
	// nothing) a commit span. Empty polls make none.
	received, settled := 0, 0
	for _, s := range rec.Ended() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		switch s.Name() {
		case "receive traced":
			require.Equal(t, trace.SpanKindClient, s.SpanKind())
			require.Equal(t, "receive", attrs["messaging.operation.type"])
			require.Equal(t, "g", attrs["messaging.consumer.group.name"])
			if s.Status().Code != codes.Error {
				require.NotEmpty(t, attrs["messaging.batch.message_count"], "a receive span without an error carries records")
				received++
			}
		case "commit traced":
			require.Equal(t, "settle", attrs["messaging.operation.type"])
			settled++
		}
	}
	require.NotZero(t, received)
	require.NotZero(t, settled)

	// Without a TracerProvider: no header.
	plain := setup(t, nil)
	plain.topic(t, "plain", 1)
	r := &pgmsg.Record{Topic: "plain", Value: []byte("x")}
	require.NoError(t, plain.client.Publish(ctx, []*pgmsg.Record{r}, nil))
	require.Nil(t, r.Headers)
}
