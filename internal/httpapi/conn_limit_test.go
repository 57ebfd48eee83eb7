package httpapi

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

// chanListener is a listener whose connections the test hands it.
type chanListener struct {
	conns  chan net.Conn
	closed chan struct{}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}
func (l *chanListener) Close() error   { close(l.closed); return nil }
func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }

// With MaxConnections open, Accept waits until one of them closes; a
// closed listener ends the wait.
func TestConnectionLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &chanListener{conns: make(chan net.Conn, 10), closed: make(chan struct{})}
		for range 4 {
			c, peer := net.Pipe()
			t.Cleanup(func() { peer.Close() })
			inner.conns <- c
		}
		ln := newLimitListener(inner, 2)
		a, err := ln.Accept()
		require.NoError(t, err)
		b, err := ln.Accept()
		require.NoError(t, err)
		var accepted atomic.Int32
		third := make(chan net.Conn)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				accepted.Add(1)
				third <- c
			}
		}()
		synctest.Wait()
		require.Zero(t, accepted.Load(), "a third connection was accepted with two open")
		require.NoError(t, a.Close())
		require.NoError(t, a.Close()) // a second close frees no second slot
		c := <-third
		require.EqualValues(t, 1, accepted.Load())

		// Two open again (b, c): the next Accept waits, and ends when
		// the listener is closed.
		errc := make(chan error)
		go func() {
			_, err := ln.Accept()
			errc <- err
		}()
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("Accept returned with two open: %v", err)
		default:
		}
		require.NoError(t, ln.Close())
		require.ErrorIs(t, <-errc, net.ErrClosed)
		b.Close()
		c.Close()
	})
}

// The server's listener has the limit (1024 by default), below TLS.
func TestServerListenerLimited(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	inner := &chanListener{conns: make(chan net.Conn), closed: make(chan struct{})}
	ln, ok := tb.server.listener(inner).(*limitListener)
	require.True(t, ok, "no connection limit")
	require.Equal(t, MaxConnectionsDefault, cap(ln.slots))

	srv, err := New(Config{Client: tb.client, MaxConnections: -1, TLSConfig: &tls.Config{}})
	require.NoError(t, err)
	_, limited := srv.listener(inner).(*limitListener)
	require.False(t, limited, "negative MaxConnections: no limit")
}

// Answers over TLS carry Strict-Transport-Security; plain ones do not.
func TestHSTSUnderTLS(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ts := httptest.NewTLSServer(tb.server)
	t.Cleanup(ts.Close)
	for _, path := range []string{"/healthz", "/v1/topics", "/ui/", "/nope"} {
		res, err := ts.Client().Get(ts.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, hstsHeader, res.Header.Get("Strict-Transport-Security"), path)
	}
	mts := httptest.NewTLSServer(tb.server.metricsHandler())
	t.Cleanup(mts.Close)
	res, err := mts.Client().Get(mts.URL + "/metrics")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, hstsHeader, res.Header.Get("Strict-Transport-Security"))

	plain := tb.do(t, http.MethodGet, "/healthz", "", nil)
	require.Empty(t, plain.header.Get("Strict-Transport-Security"))
}
