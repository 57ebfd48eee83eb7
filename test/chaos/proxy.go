package chaos

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy between the agents and PostgreSQL that breaks the
// network the ways a real one breaks:
//
//   - Cut closes every connection at once (mid-transaction, mid-statement:
//     whatever is in flight);
//   - Stall stops the bytes both ways (connections stay open), a partition
//     that a TCP keepalive would not notice;
//   - SetLatency delays every chunk of bytes by a random 1–200 ms or so,
//     in order, in both directions: a slow link;
//   - Blackhole makes some connections swallow everything they are sent,
//     both ways, without closing: a peer behind a link that drops every
//     packet (TCP cannot lose bytes inside a connection; lost packets
//     there are retransmitted, so loss shows as delay, and total loss as
//     a connection that never answers again);
//   - CutAtCommit and CutAtReply cut one connection at an exact point of
//     the PostgreSQL protocol: after the server answered a COMMIT (the
//     transaction is committed) and before the client got the answer, or
//     after the server answered any statement (an implicit transaction is
//     committed too), so the client cannot know the outcome.
//
// The proxy frames the protocol's messages (a type byte and a length) to
// find those points; it forwards the bytes unchanged.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[*proxyConn]struct{}
	stallCh chan struct{} // closed when not stalled
	closed  bool
	wg      sync.WaitGroup

	// latency range in nanoseconds (0, 0: none).
	latMin, latMax atomic.Int64
	// armed cuts: how many connections to cut at the next answer to a
	// COMMIT, or to any statement.
	cutCommit, cutReply atomic.Int64
	// cutsAtCommit and cutsAtReply count the cuts made.
	cutsAtCommit, cutsAtReply atomic.Int64
}

type proxyConn struct {
	client, server net.Conn
	closeOnce      sync.Once
	// blackholed: bytes read from either side are thrown away.
	blackholed atomic.Bool
	// commitSent: the client sent a COMMIT whose answer has not come yet.
	commitSent atomic.Bool
}

func (c *proxyConn) close() {
	c.closeOnce.Do(func() {
		c.client.Close()
		c.server.Close()
	})
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
	go func() { p.pipe(pc, server, client, true); done <- struct{}{} }()
	go func() { p.pipe(pc, client, server, false); done <- struct{}{} }()
	<-done
	pc.close()
	<-done
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// chunk is a run of whole protocol messages to forward at due; cut: close
// the connection instead (after the chunks before it).
type chunk struct {
	b   []byte
	due time.Time
	cut bool
}

// pipe copies src to dst: a reader that frames the messages and a writer
// that delays them, waits while the proxy is stalled and drops them while
// the connection is blackholed. fromClient tells the direction.
func (p *Proxy) pipe(pc *proxyConn, dst, src net.Conn, fromClient bool) {
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		f := framer{untyped: fromClient}
		buf := make([]byte, 32<<10)
		var last time.Time
		for {
			n, err := src.Read(buf)
			if n > 0 {
				out, cut := f.feed(buf[:n], func(typ byte, body []byte) bool {
					if fromClient {
						if isCommit(typ, body) {
							pc.commitSent.Store(true)
						}
						return false
					}
					return p.cutHere(pc, typ, body)
				})
				due := time.Now().Add(p.delay())
				if due.Before(last) { // in order: a chunk never overtakes the one before
					due = last
				}
				last = due
				if len(out) > 0 {
					q <- chunk{b: out, due: due}
				}
				if cut {
					q <- chunk{due: due, cut: true}
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		p.mu.Lock()
		stall := p.stallCh
		p.mu.Unlock()
		<-stall
		if c.cut {
			pc.close()
			break
		}
		if pc.blackholed.Load() {
			continue
		}
		if _, err := dst.Write(c.b); err != nil {
			pc.close()
			break
		}
	}
	for range q { // let the reader end (it ends once the connection is closed)
	}
}

// cutHere reports whether the server's message typ is the answer at which
// an armed cut closes pc.
func (p *Proxy) cutHere(pc *proxyConn, typ byte, body []byte) bool {
	if typ != 'C' { // CommandComplete
		return false
	}
	if pc.commitSent.Swap(false) && strings.HasPrefix(string(body), "COMMIT") && take(&p.cutCommit) {
		p.cutsAtCommit.Add(1)
		return true
	}
	if take(&p.cutReply) {
		p.cutsAtReply.Add(1)
		return true
	}
	return false
}

// take decrements n if it is positive and reports whether it did.
func take(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// isCommit reports whether the client's message is a COMMIT: a simple
// query, or the statement of a Parse.
func isCommit(typ byte, body []byte) bool {
	var q []byte
	switch typ {
	case 'Q':
		q = body
	case 'P': // name \0 query \0 ...
		i := 0
		for i < len(body) && body[i] != 0 {
			i++
		}
		if i < len(body) {
			q = body[i+1:]
		}
	default:
		return false
	}
	s := strings.ToLower(strings.TrimSpace(strings.TrimRight(string(q), "\x00")))
	s = strings.TrimSuffix(s, ";")
	return s == "commit" || s == "end" || s == "commit transaction" || s == "commit work"
}

// framer splits a byte stream of the PostgreSQL protocol into messages.
type framer struct {
	// untyped: the next message has no type byte (the client's first:
	// a startup or cancel request). The clients connect with
	// sslmode=disable: no SSL request, whose one-byte answer would break
	// the server side's framing.
	untyped bool
	pending []byte
}

// feed appends b and returns the bytes of the whole messages it completed,
// calling fn on each typed one; if fn returns true, the bytes stop before
// that message and cut is true.
func (f *framer) feed(b []byte, fn func(typ byte, body []byte) bool) (out []byte, cut bool) {
	f.pending = append(f.pending, b...)
	i := 0
	for {
		rest := f.pending[i:]
		if f.untyped {
			if len(rest) < 8 {
				break
			}
			n := int(binary.BigEndian.Uint32(rest))
			if len(rest) < n {
				break
			}
			f.untyped = false
			i += n
			continue
		}
		if len(rest) < 5 {
			break
		}
		n := 1 + int(binary.BigEndian.Uint32(rest[1:5]))
		if len(rest) < n {
			break
		}
		if fn(rest[0], rest[5:n]) {
			out = append([]byte(nil), f.pending[:i]...)
			f.pending = nil
			return out, true
		}
		i += n
	}
	out = append([]byte(nil), f.pending[:i]...)
	f.pending = append(f.pending[:0], f.pending[i:]...)
	return out, false
}

// delay draws the latency of one chunk.
func (p *Proxy) delay() time.Duration {
	lo, hi := p.latMin.Load(), p.latMax.Load()
	if hi <= 0 {
		return 0
	}
	if hi <= lo {
		return time.Duration(lo)
	}
	return time.Duration(lo + rand.Int64N(hi-lo+1))
}

// SetLatency delays every chunk of bytes, both ways, by a random duration
// in [lo, hi] (0, 0: no delay). Chunks keep their order.
func (p *Proxy) SetLatency(lo, hi time.Duration) {
	p.latMin.Store(int64(lo))
	p.latMax.Store(int64(hi))
}

// CutAtCommit arms n cuts: each of the next n answers to a COMMIT is not
// forwarded, and its connection is closed instead.
func (p *Proxy) CutAtCommit(n int) { p.cutCommit.Store(int64(n)) }

// CutAtReply arms n cuts at the next n answers to any statement.
func (p *Proxy) CutAtReply(n int) { p.cutReply.Store(int64(n)) }

// Disarm cancels the armed cuts that have not happened and returns how
// many cuts at a COMMIT and at a reply were made since the last Disarm.
func (p *Proxy) Disarm() (atCommit, atReply int) {
	p.cutCommit.Store(0)
	p.cutReply.Store(0)
	return int(p.cutsAtCommit.Swap(0)), int(p.cutsAtReply.Swap(0))
}

// Blackholed are connections that swallow all traffic.
type Blackholed struct {
	p     *Proxy
	conns []*proxyConn
}

// Blackhole makes up to n of the open connections, drawn at random,
// swallow all traffic both ways from now on, and returns them; Close or
// Cut ends them (as a TCP retransmission timeout finally would).
func (p *Proxy) Blackhole(n int) *Blackholed {
	p.mu.Lock()
	var cands []*proxyConn
	for c := range p.conns {
		if !c.blackholed.Load() {
			cands = append(cands, c)
		}
	}
	p.mu.Unlock()
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	if len(cands) > n {
		cands = cands[:n]
	}
	for _, c := range cands {
		c.blackholed.Store(true)
	}
	return &Blackholed{p: p, conns: cands}
}

// Len is how many connections were blackholed.
func (b *Blackholed) Len() int { return len(b.conns) }

// Open reports how many of them are still open: their client has not
// given up on them (nor did the proxy close them).
func (b *Blackholed) Open() int {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	n := 0
	for _, c := range b.conns {
		if _, ok := b.p.conns[c]; ok {
			n++
		}
	}
	return n
}

// Close closes them.
func (b *Blackholed) Close() {
	for _, c := range b.conns {
		c.close()
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
