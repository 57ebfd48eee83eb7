package kafkasrv_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

// env is a test's schema of its own and a Client on it (pgmsgtest.Env),
// and a context that ends after timeout.
type env struct {
	*pgmsgtest.Env
	Ctx context.Context
}

func newEnv(t testing.TB, maxConns int32, timeout time.Duration) *env {
	t.Helper()
	return &env{Env: pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: maxConns}), nil), Ctx: pgtest.Context(t, timeout)}
}

type testBundle struct {
	*env
	srv  *kafkasrv.Server
	addr string
}

// setup starts a listener on 127.0.0.1:0 over a fresh schema; cfg may be
// nil (its Client is set).
func setup(t *testing.T, cfg *kafkasrv.Config) *testBundle {
	t.Helper()
	return setupCfg(t, cfg)
}

func setupTB(b *testing.B) *testBundle { return setupCfg(b, nil) }

func setupCfg(t testing.TB, cfg *kafkasrv.Config) *testBundle {
	t.Helper()
	b := newEnv(t, 16, 2*time.Minute)
	c := kafkasrv.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Client = b.Client
	srv, err := kafkasrv.New(c)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.NoError(t, <-done)
	})
	return &testBundle{env: b, srv: srv, addr: ln.Addr().String()}
}

// kclient returns a franz-go client of the listener, closed at the end.
func (tb *testBundle) kclient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tb.addr), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}
