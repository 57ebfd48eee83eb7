package chaos

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy between the agents and PostgreSQL that can cut every
// connection (mid-transaction, mid-statement: whatever is in flight) and
// stall them (bytes stop flowing both ways, connections stay open), to
// simulate a network partition that a TCP keepalive would not notice.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[*proxyConn]struct{}
	stallCh chan struct{} // closed when not stalled
	closed  bool
	wg      sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
}

func (c *proxyConn) close() {
	c.client.Close()
	c.server.Close()
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}, stallCh: make(chan struct{})}
	close(p.stallCh)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 3*time.Second)
	if err != nil {
		client.Close()
		return
	}
	pc := &proxyConn{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.close()
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done
	pc.close()
	<-done
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pipe copies src to dst, waiting while the proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			stall := p.stallCh
			p.mu.Unlock()
			<-stall
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

// Cut closes every open connection at once (both directions) and returns
// how many were cut. New connections are accepted as before.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	return len(conns)
}

// Stall stops all traffic (open connections and new ones) for d, then lets
// it flow again.
func (p *Proxy) Stall(d time.Duration) {
	p.mu.Lock()
	ch := make(chan struct{})
	p.stallCh = ch
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	close(ch)
	p.stallCh = make(chan struct{})
	close(p.stallCh)
	p.mu.Unlock()
}

// Conns is the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops accepting and cuts every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
