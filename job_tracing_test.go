package pgmsg_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgmsg/pgmsg"
)

// With a TracerProvider, an enqueue makes a producer span whose context
// travels in each job's metadata, and the worker's process span around the
// handler continues that trace.
func TestJobTracing(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tb := setup(t, &pgmsg.Config{TracerProvider: tp, PollInterval: 20 * time.Millisecond})
	tb.queue(t, "tq", pgmsg.QueueConfig{})

	ctx, parent := tp.Tracer("test").Start(tb.ctx, "request")
	own := `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`
	params := []pgmsg.EnqueueParams{
		{Payload: []byte("a"), Kind: "k"},
		{Payload: []byte("b"), Metadata: json.RawMessage(`{"by":"ann"}`)},
		{Payload: []byte("c"), Metadata: json.RawMessage(own)},
	}
	res, err := tb.client.EnqueueMany(ctx, "tq", params, nil)
	require.NoError(t, err)
	parent.End()
	require.Nil(t, params[0].Metadata, "the caller's params are not changed")

	var publish sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "publish tq" {
			publish = s
		}
	}
	require.NotNil(t, publish)
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind())
	require.Equal(t, parent.SpanContext().SpanID(), publish.Parent().SpanID())
	for i, r := range res[:2] {
		j, err := tb.client.GetJob(tb.ctx, r.ID)
		require.NoError(t, err)
		var md map[string]string
		require.NoError(t, json.Unmarshal(j.Metadata, &md))
		require.Contains(t, md["traceparent"], publish.SpanContext().SpanID().String(), "job %d", i)
		if i == 1 {
			require.Equal(t, "ann", md["by"], "the job's own metadata is kept")
		}
	}
	j, err := tb.client.GetJob(tb.ctx, res[2].ID)
	require.NoError(t, err)
	require.JSONEq(t, own, string(j.Metadata), "a job's own trace context is kept")

	var (
		mu      sync.Mutex
		handled = map[string]trace.SpanContext{}
	)
	w, err := tb.client.NewWorker("tq", func(ctx context.Context, job *pgmsg.Job) error {
		mu.Lock()
		handled[string(job.Payload)] = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		return nil
	}, nil)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(tb.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	require.Eventually(t, func() bool {
		st, err := tb.client.QueueStats(tb.ctx, "tq")
		require.NoError(t, err)
		return st.Archived == 3
	}, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, parent.SpanContext().TraceID(), handled["a"].TraceID(), "the handler runs in the enqueuing request's trace")
	require.Equal(t, parent.SpanContext().TraceID(), handled["b"].TraceID())
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", handled["c"].TraceID().String())
	names := map[string]int{}
	for _, s := range rec.Ended() {
		names[s.Name()]++
		if s.Name() == "process tq" && s.SpanContext().SpanID() == handled["a"].SpanID() {
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			require.Equal(t, publish.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the enqueue's span")
		}
	}
	require.Equal(t, 3, names["process tq"])
	require.GreaterOrEqual(t, names["receive tq"], 1)
	require.GreaterOrEqual(t, names["complete tq"], 1)

	// Without a TracerProvider, nothing is added.
	plain, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema})
	require.NoError(t, err)
	defer plain.Close()
	r, err := plain.Enqueue(ctx, "tq", pgmsg.EnqueueParams{Payload: []byte("d")}, nil)
	require.NoError(t, err)
	j, err = plain.GetJob(tb.ctx, r.ID)
	require.NoError(t, err)
	require.Nil(t, j.Metadata)
}
