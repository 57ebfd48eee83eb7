package pgmsg_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// The SQL API's "not now" errors say how long to keep retrying, in their
// DETAIL, so that a client in any language need not read the settings:
// PM014 the topic's backpressure_timeout_ms (5000 unless set), PM109 the
// queue's backpressure_timeout.
func TestBackpressureErrorsCarryTheWait(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	detail := func(err error) string {
		t.Helper()
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error, got %v", err)
		return pgErr.Detail
	}
	publish := func(topic string) error {
		_, err := tb.Pool.Exec(tb.ctx, "SELECT * FROM "+pgx.Identifier{tb.Schema, "publish"}.Sanitize()+"($1, ARRAY['x'::bytea])", topic)
		return err
	}
	for topic, want := range map[string]string{"set": "backpressure_timeout_ms=1234", "unset": "backpressure_timeout_ms=5000"} {
		settings := map[string]any{"max_lag_records": 1}
		if topic == "set" {
			settings["backpressure_timeout_ms"] = 1234
		}
		_, err := tb.client.CreateTopic(tb.ctx, topic, pgmsg.TopicConfig{Partitions: 1, Settings: settings})
		require.NoError(t, err)
		_, err = tb.client.CreateGroup(tb.ctx, topic, "g", pgmsg.PositionEarliest)
		require.NoError(t, err)
		require.NoError(t, publish(topic))
		err = publish(topic)
		requirePMCode(t, err, "PM014")
		require.Equal(t, want, detail(err), topic)
	}

	_, err := tb.client.CreateQueue(tb.ctx, "capped", pgmsg.QueueConfig{MaxDepth: 1, BackpressureTimeout: 1500 * time.Millisecond})
	require.NoError(t, err)
	enqueue := func() error {
		_, err := tb.Pool.Exec(tb.ctx, "SELECT * FROM "+pgx.Identifier{tb.Schema, "enqueue"}.Sanitize()+"('capped', '{}'::bytea)")
		return err
	}
	require.NoError(t, enqueue())
	err = enqueue()
	requirePMCode(t, err, "PM109")
	require.Equal(t, "backpressure_timeout_ms=1500", detail(err))
}
