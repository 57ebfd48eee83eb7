package pgmsg_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A job claim is capped by payload bytes as well as by count. The
// cap is enforced by job_claim itself, so the jobs beyond it are not leased;
// a claim always hands out at least one job, however large.
func TestJobClaimMaxBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	// Five jobs of 1000 bytes, then one of 5000.
	b.enqueueN(t, "q", 6, func(i int) pgmsg.EnqueueParams {
		n := 1000
		if i == 5 {
			n = 5000
		}
		return pgmsg.EnqueueParams{Payload: bytes.Repeat([]byte{'a' + byte(i)}, n)}
	})

	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 2500})
	require.NoError(t, err)
	require.Len(t, jobs, 2, "2000 bytes fit in 2500, a third job would not")
	require.Equal(t, byte('a'), jobs[0].Payload[0])
	require.Equal(t, byte('b'), jobs[1].Payload[0])
	s := b.stats(t, "q")
	require.Equal(t, int64(2), s.Running, "jobs beyond the cap are not leased")
	require.Equal(t, int64(4), s.Available)

	// Exactly at the cap is in.
	jobs, err = b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 3000})
	require.NoError(t, err)
	require.Len(t, jobs, 3)

	// The 5000-byte job alone is larger than the cap: it is handed out
	// anyway, alone.
	jobs, err = b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Len(t, jobs[0].Payload, 5000)
	require.Equal(t, int64(0), b.stats(t, "q").Available)

	_, err = b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{MaxBytes: -1})
	requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
}
