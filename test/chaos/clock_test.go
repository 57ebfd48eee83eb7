package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// findFaketime returns the path of libfaketime; without it the test is
// skipped, or fails when PGMSG_REQUIRE_FAKETIME=1 (CI, whose .ci/run
// installs it).
func findFaketime(t *testing.T) string {
	t.Helper()
	libs, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
	if len(libs) > 0 {
		return libs[0]
	}
	if os.Getenv("PGMSG_REQUIRE_FAKETIME") == "1" {
		t.Fatal("PGMSG_REQUIRE_FAKETIME=1 but libfaketime is not installed (apt-get install libfaketime)")
	}
	t.Skip("libfaketime not installed (apt-get install libfaketime); CI sets PGMSG_REQUIRE_FAKETIME=1")
	return ""
}

// Leases, sessions and claim expiries are on the database's clock: the
// client sends durations and the server computes every deadline from its
// own now(), and the client measures its own intervals on Go's monotonic
// clock, which a wall-clock step does not move. So a client whose wall
// clock is an hour ahead of the database's, or an hour behind (as after a
// step, or with no NTP), loses no lease: a job running for 2.5 leases is
// completed on its first attempt, a group member keeps its partitions,
// and its claims, handled past the lease, are committed once.
//
// Go programs read the clock through the vDSO, not libc, so no preload
// can shift the client's clock; the test shifts the server's instead
// (libfaketime under PostgreSQL), which gives both sides the same skew
// relative to each other: what matters is the difference.
func TestLeasesOnDatabaseClock(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers")
	}
	requireServerBinaries(t)
	lib := findFaketime(t)
	const lease = 2 * time.Second
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		// The server's clock is skew ahead: the client's is skew behind.
		t.Run(fmt.Sprintf("client %s", -skew), func(t *testing.T) {
			t.Setenv("LD_PRELOAD", lib)
			t.Setenv("FAKETIME", fmt.Sprintf("%+dm", int(skew.Minutes())))
			t.Setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cl, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"fsync": "off"}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = cl.Stop() })
			pool, err := pgxpool.New(ctx, cl.URL)
			require.NoError(t, err)
			defer pool.Close()

			var serverNow time.Time
			require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&serverNow))
			got := time.Until(serverNow)
			t.Logf("the server's clock is %s ahead of the client's", got.Round(time.Second))
			require.InDelta(t, skew.Seconds(), got.Seconds(), 300, "the skew is in place")

			m, err := pgmsgmigrate.New(pool, nil)
			require.NoError(t, err)
			_, err = m.Up(ctx)
			require.NoError(t, err)
			c, err := pgmsg.NewClient(pool, &pgmsg.Config{ClaimLease: lease, PollInterval: 50 * time.Millisecond,
				Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			defer c.Close()
			leasesHold(t, ctx, c, lease)
		})
	}
}
