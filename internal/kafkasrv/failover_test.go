package kafkasrv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// A real asynchronous failover under the listener: a private primary
// and a streaming standby; the standby is cut off from the primary
// (primary_conninfo emptied), the primary takes 40 records the standby
// never gets and a franz-go consumer reads them through the listener;
// then the primary is killed and the standby promoted (a new timeline),
// and the listener, on a multi-host URL, goes on with it. The consumer,
// which had read up to offset 139, is fenced, reports the loss of
// 100..139 (kgo.ErrDataLoss) and goes on at 100 with the records the new
// primary gave those offsets.
func TestKafkaConsumerAcrossPromotion(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	settings := map[string]string{"fsync": "off", "full_page_writes": "off"}
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings})
	if errors.Is(err, pgcluster.ErrNoBinaries) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := pgcluster.StartStandby(ctx, primary, pgcluster.Options{Settings: settings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })

	pool := func(url string) *pgxpool.Pool {
		p, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	primaryPool, standbyPool := pool(primary.URL), pool(standby.URL)
	// The listener's: both servers, the writable one.
	multi := pool(fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		primary.Port, standby.Port))
	m, err := pgmsgmigrate.New(primaryPool, nil)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	client, err := pgmsg.NewClient(multi, nil)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	_, err = client.CreateTopic(ctx, "fo", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	publish := func(c *pgmsg.Client, prefix string, n int) {
		t.Helper()
		recs := make([]*pgmsg.Record, n)
		for i := range recs {
			recs[i] = &pgmsg.Record{Topic: "fo", Partition: 0, Value: fmt.Appendf(nil, "%s%d", prefix, i)}
		}
		require.NoError(t, c.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	}
	publish(client, "old", 100)
	var target string
	require.NoError(t, primaryPool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&target))
	require.Eventually(t, func() bool {
		var ok bool
		err := standbyPool.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn`, target).Scan(&ok)
		return err == nil && ok
	}, time.Minute, 10*time.Millisecond, "the standby did not replay the first records")

	// The standby stops receiving: what the primary writes now is what
	// an asynchronous failover loses.
	_, err = standbyPool.Exec(ctx, `ALTER SYSTEM SET primary_conninfo = ''`)
	require.NoError(t, err)
	_, err = standbyPool.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		err := standbyPool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_wal_receiver`).Scan(&n)
		return err == nil && n == 0
	}, time.Minute, 10*time.Millisecond, "the standby kept receiving")
	publish(client, "lost", 40) // offsets 100..139

	srv, err := kafkasrv.New(kafkasrv.Config{Client: client})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(ln.Addr().String()), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"fo": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	recs := pollN(t, ctx, cl, 140)
	require.Equal(t, "lost39", string(recs[139].Value))
	require.Equal(t, int32(0), recs[139].LeaderEpoch)

	primary.Kill()
	_, err = standbyPool.Exec(ctx, `SELECT pg_promote(wait => false)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var recovering bool
		err := standbyPool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering)
		return err == nil && !recovering
	}, time.Minute, 10*time.Millisecond)
	promoted, err := pgmsg.NewClient(standbyPool, nil)
	require.NoError(t, err)
	t.Cleanup(promoted.Close)
	publish(promoted, "new", 60) // offsets 100..159 on the new primary

	loss, after := pollPastLoss(t, ctx, cl, 60, true)
	require.Equal(t, [2]int64{140, 100}, [2]int64{loss.ConsumedTo, loss.ResetTo})
	for i, r := range after {
		require.Equal(t, int64(100+i), r.Offset)
		require.Equal(t, fmt.Sprintf("new%d", i), string(r.Value))
		require.Greater(t, r.LeaderEpoch, int32(0), "the new timeline's epoch")
	}
}
