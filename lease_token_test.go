package pgmsg_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A job's lease token must not be guessable by another claimer of
// the queue, nor be echoed in errors; a stale token is still refused.
func TestJobLeaseTokensUnguessable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.enqueueN(t, "q", 50, nil)
	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 50})
	require.NoError(t, err)
	require.Len(t, jobs, 50)
	seen := map[int64]bool{}
	for _, j := range jobs {
		// A random 53-bit token is below 2^24 with probability 2^-29 (counters start at 1).
		require.Greater(t, j.LeaseToken, int64(1)<<24, "job %d has a small lease token", j.ID)
		require.False(t, seen[j.LeaseToken], "lease token %d drawn twice", j.LeaseToken)
		seen[j.LeaseToken] = true
	}

	// Guessing small tokens, or the token of a neighbouring job, fails, and
	// the errors do not reveal the live token.
	j := jobs[0]
	live := strconv.FormatInt(j.LeaseToken, 10)
	for _, guess := range []int64{0, 1, 2, 3, jobs[1].LeaseToken, j.LeaseToken + 1, j.LeaseToken - 1} {
		g := &pgmsg.Job{ID: j.ID, Queue: "q", LeaseToken: guess}
		err := b.client.Complete(b.ctx, g)
		requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
		require.NotContains(t, err.Error(), live)
		_, err = b.client.Fail(b.ctx, g, errors.New("stolen"), nil)
		requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
		require.NotContains(t, err.Error(), live)
		_, err = b.client.Snooze(b.ctx, g, 0)
		requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
		require.NotContains(t, err.Error(), live)
		err = b.client.ExtendJob(b.ctx, g, time.Minute)
		requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
		require.NotContains(t, err.Error(), live)
	}
	got, err := b.client.GetJob(b.ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRunning, got.State, "a guess changed the job")
	require.Equal(t, 1, got.Attempt)

	// A new claim of the same job draws a new token; the old one is fenced.
	_, err = b.client.Snooze(b.ctx, j, 0)
	require.NoError(t, err)
	again := b.claimWithin(t, "q", 5*time.Second, &pgmsg.ClaimJobsOpts{})
	require.Equal(t, j.ID, again.ID)
	require.NotEqual(t, j.LeaseToken, again.LeaseToken)
	require.Greater(t, again.LeaseToken, int64(1)<<32)
	err = b.client.Complete(b.ctx, j)
	requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
	require.NotContains(t, err.Error(), strconv.FormatInt(again.LeaseToken, 10))
	require.NoError(t, b.client.Complete(b.ctx, again))
	// Archived: still PM106, still no token in the text.
	err = b.client.Complete(b.ctx, again)
	requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
	require.NotContains(t, err.Error(), strconv.FormatInt(again.LeaseToken, 10))
}
