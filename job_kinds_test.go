package pgmsg_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

type reportArgs struct {
	Rows int `json:"rows"`
}

func (reportArgs) Kind() string { return "report" }

type noKindArgs struct{}

func (noKindArgs) Kind() string { return "" }

// One worker serves several kinds, each decoded into its own type; a job
// of a kind nobody handles fails with ErrUnknownKind and is retried; one
// whose payload does not decode goes to the dead-letter state at once.
func TestKinds(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "typed", pgmsg.QueueConfig{RetryBackoff: time.Hour})

	var mu sync.Mutex
	var emails []string
	var rows []int
	kinds := pgmsg.NewKinds()
	pgmsg.AddKind(kinds, func(_ context.Context, job *pgmsg.Job, args emailArgs) error {
		mu.Lock()
		defer mu.Unlock()
		emails = append(emails, args.To)
		return nil
	})
	pgmsg.AddKind(kinds, func(_ context.Context, job *pgmsg.Job, args reportArgs) error {
		mu.Lock()
		defer mu.Unlock()
		rows = append(rows, args.Rows)
		return nil
	})
	require.PanicsWithValue(t, `pgmsg: AddKind: kind "email" registered twice`, func() {
		pgmsg.AddKind(kinds, func(context.Context, *pgmsg.Job, emailArgs) error { return nil })
	})
	require.Panics(t, func() {
		pgmsg.AddKind(kinds, func(context.Context, *pgmsg.Job, noKindArgs) error { return nil })
	})

	email, err := pgmsg.NewJob(emailArgs{To: "a@example.com"})
	require.NoError(t, err)
	require.Equal(t, "email", email.Kind)
	require.JSONEq(t, `{"to":"a@example.com"}`, string(email.Payload))
	report, err := pgmsg.NewJob(reportArgs{Rows: 7})
	require.NoError(t, err)
	report.Priority = 5
	_, err = pgmsg.NewJob(nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	res, err := tb.client.EnqueueMany(tb.ctx, "typed", []pgmsg.EnqueueParams{
		email, report,
		{Kind: "sms", Payload: []byte(`{}`)},
		{Kind: "email", Payload: []byte(`not json`)},
	}, nil)
	require.NoError(t, err)
	unknown, garbled := res[2].ID, res[3].ID

	stop := tb.runWorker(t, "typed", kinds.Handle, &pgmsg.WorkerOpts{Concurrency: 4})
	waitFor(t, 30*time.Second, "every job attempted", func() bool {
		s := tb.stats(t, "typed")
		return s.Archived == 2 && s.Retrying == 1 && s.Dead == 1
	})
	require.ErrorIs(t, stop(), context.Canceled)
	require.Equal(t, []string{"a@example.com"}, emails)
	require.Equal(t, []int{7}, rows)

	j, err := tb.client.GetJob(tb.ctx, unknown)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRetrying, j.State)
	require.Len(t, j.Errors, 1)
	require.Contains(t, j.Errors[0].Error, `no handler for job kind "sms"`)
	j, err = tb.client.GetJob(tb.ctx, garbled)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateDead, j.State)
	require.Equal(t, 1, j.Attempt, "discarded at its first attempt")
	require.Contains(t, j.Errors[0].Error, "payload does not decode into pgmsg_test.emailArgs")
}
