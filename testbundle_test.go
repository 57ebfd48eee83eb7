package pgmsg_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

type testBundle struct {
	*pgtest.Bundle
	client *pgmsg.Client
	ctx    context.Context
}

func setup(t *testing.T, cfg *pgmsg.Config) *testBundle {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 24})
	c := pgmsg.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = b.Schema
	if c.PollInterval == 0 {
		c.PollInterval = 50 * time.Millisecond
	}
	client, err := pgmsg.NewClient(b.Pool, &c)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &testBundle{Bundle: b, client: client, ctx: ctx}
}

func (tb *testBundle) topic(t *testing.T, name string, partitions int) {
	t.Helper()
	_, err := tb.client.CreateTopic(tb.ctx, name, pgmsg.TopicConfig{Partitions: partitions, SegmentRecords: 64})
	require.NoError(t, err)
}
