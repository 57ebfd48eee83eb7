package schemapool

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Only a lack of server resources (and the like) is retried, five times
// at most.
func TestRetry(t *testing.T) {
	oom := &pgconn.PgError{Code: "53200", Message: "out of shared memory"}
	require.True(t, transient(oom))
	require.True(t, transient(&pgconn.PgError{Code: "40P01"}))
	require.False(t, transient(&pgconn.PgError{Code: "42P01"}))
	require.False(t, transient(errors.New("other")))

	calls := 0
	require.NoError(t, retry(context.Background(), func() error {
		if calls++; calls < 3 {
			return oom
		}
		return nil
	}))
	require.Equal(t, 3, calls)

	calls = 0
	syntax := &pgconn.PgError{Code: "42601"}
	require.ErrorIs(t, retry(context.Background(), func() error { calls++; return syntax }), syntax)
	require.Equal(t, 1, calls, "a lasting error is not retried")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	require.ErrorIs(t, retry(ctx, func() error { calls++; return oom }), oom)
	require.Equal(t, 1, calls, "no retry once the context is done")
}
