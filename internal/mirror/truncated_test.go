package mirror_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/mirror"
)

// A mirror running through a failover that lost records stops with
// pgmsg.ErrLogTruncated (its consumer was given the lost offsets). A
// mirror that starts after a failover that lost records of the pgmsg
// partition (played in SQL: the records from offset 60 on deleted, the
// counter and the group's cursor set back, the partition's timeline made
// another than the server's) finds Kafka holding offsets up to 99 of the
// old log epoch, which ends at 60 on the new primary: it stops with
// ErrTruncatedHistory (MR005) instead of skipping the new records at
// offsets 60..79 as already copied.
func TestMirrorTruncatedHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createTopic(t, b, "tr", 1)
	publish(t, b.client, "tr", 0, 100, 16)
	cfg := mirror.Config{Client: b.client, Kafka: b.kafka, Topics: []string{"tr"}, CreateTopics: true, Batch: 25}
	require.Equal(t, mirror.Stats{Mirrored: 100}, run(t, cfg))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := pgx.Identifier{b.pg.Schema}.Sanitize()
	for _, q := range []string{
		`DELETE FROM %[1]s.record r USING %[1]s.topic t WHERE t.topic_id = r.topic_id AND t.name = 'tr' AND r."offset" >= 60`,
		`UPDATE %[1]s.topic_partition c SET next_offset = 60, log_timeline = c.log_timeline + 1000
		   FROM %[1]s.topic t WHERE t.topic_id = c.topic_id AND t.name = 'tr'`,
		`UPDATE %[1]s.group_cursor c SET next_offset = least(c.next_offset, 50)
		   FROM %[1]s.topic t WHERE t.topic_id = c.topic_id AND t.name = 'tr'`,
	} {
		_, err := b.pg.Pool.Exec(ctx, fmt.Sprintf(q, s))
		require.NoError(t, err)
	}
	publish(t, b.client, "tr", 1000, 20, 16) // offsets 60..79, a new log epoch

	cfg.Drain = true
	// The same process: its consumer was given offsets 60..99 itself.
	m, err := mirror.New(cfg)
	require.NoError(t, err)
	defer m.Close()
	require.ErrorIs(t, m.Run(ctx), pgmsg.ErrLogTruncated)

	// A process started after the failover knows only what Kafka holds.
	fresh, err := pgmsg.NewClient(b.pg.Pool, &pgmsg.Config{Schema: b.pg.Schema})
	require.NoError(t, err)
	defer fresh.Close()
	cfg.Client = fresh
	m2, err := mirror.New(cfg)
	require.NoError(t, err)
	defer m2.Close()
	err = m2.Run(ctx)
	require.ErrorIs(t, err, mirror.ErrTruncatedHistory)
	require.ErrorContains(t, err, "[MR005]")
	require.ErrorContains(t, err, "offsets up to 99 of log epoch 0, which ends at offset 60")
}
