package httpapi

import (
	"crypto/tls"
	"net"
	"sync"
)

// MaxConnectionsDefault is Config.MaxConnections left zero.
const MaxConnectionsDefault = 1024

// hstsHeader is the Strict-Transport-Security of answers served over TLS:
// a year, this host only (other services may share the domain).
const hstsHeader = "max-age=31536000"

// listener returns what Run and RunMetrics serve on: ln (a TCP listener)
// with at most MaxConnections connections open at once, then TLS if
// configured. The limit is taken below TLS, so that a connection waiting
// for its turn costs no handshake, and http.Server still sees TLS
// connections (r.TLS, HTTP/2).
func (s *Server) listener(ln net.Listener) net.Listener {
	if s.cfg.MaxConnections > 0 {
		ln = newLimitListener(ln, s.cfg.MaxConnections)
	}
	if s.cfg.TLSConfig != nil {
		ln = tls.NewListener(ln, s.cfg.TLSConfig)
	}
	return ln
}

// limitListener accepts at most n connections open at once: Accept waits
// until one of them is closed (further clients wait in the kernel's
// accept queue), or the listener is.
type limitListener struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{}
	once   sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
}

// Close stops waiting Accepts and closes the listener.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitedConn gives its slot back when it is closed (once).
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
