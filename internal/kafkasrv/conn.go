package kafkasrv

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime/debug"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// conn is one client connection. Its reader goroutine reads frames and
// dispatches them; its writer goroutine writes the responses in request
// order, as Kafka requires. Produce, Fetch, ListOffsets and Metadata run
// concurrently with the requests around them (a client pipelines
// produce requests); every other request waits until the requests before
// it are answered, and the next one is read only after it (Kafka's own
// one-at-a-time processing).
type conn struct {
	s      *Server
	nc     net.Conn
	ctx    context.Context
	cancel context.CancelFunc

	inflight sync.WaitGroup

	// tails holds, per topic partition, the ticket of the last produce to
	// it that this connection read: the next one waits until it is queued,
	// so a partition's batches are stored in the order the client sent
	// them, and a Fetch or ListOffsets read after a produce waits until
	// it is stored, so it sees it. Tickets are taken by the reader, in the
	// order of the requests, before a request's goroutine starts.
	tailsMu sync.Mutex
	tails   map[tp]*ticket

	auth authState
	// pace is the connection's Fetch answers, for the cooldown.
	pace fetchPace
	// authFailed: SASL authentication failed; the connection closes
	// once the answer is written (set and read by the reader only).
	authFailed bool
}

type tp struct {
	topic     string
	partition int32
}

// pending is a request's place in the connection's response order.
type pending struct {
	done  chan struct{}
	frame []byte // the response frame; nil: nothing to write (acks=0)
	fatal bool   // close the connection instead of answering
	last  bool   // close the connection after writing frame
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, tails: map[tp]*ticket{}}
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	return c
}

// request is a decoded request frame.
type request struct {
	key, version int16
	corr         int32
	clientID     string
	req          kmsg.Request // nil when the frame could not be decoded
	size         int64        // the frame's bytes, held in Server.inflightBytes
	// tickets: a Produce request's places in its partitions' order, one
	// per partition of the request (topics, then partitions, in request
	// order).
	tickets []*ticket
	// after: what a Fetch or ListOffsets waits for first, the produce
	// requests read before it on its partitions.
	after []chan struct{}
}

// ticket is one partition's place in the connection's produce order.
// Its work starts when the produce before it is queued (prev.queued: a
// partition's queue stores its work in queue order), and it is stored
// when it and every produce before it on the partition is (stored, for
// the Fetches and ListOffsets read after it).
type ticket struct {
	key    tp
	prev   *ticket // nil: nothing before it
	queued chan struct{}
	stored chan struct{}
	qOnce  sync.Once
	sOnce  sync.Once
}

// wait waits until the produce before t on its partition is queued.
func (t *ticket) wait(ctx context.Context) error {
	if t.prev == nil {
		return nil
	}
	select {
	case <-t.prev.queued:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// queued lets the next produce of t's partition start: t has its place
// in the partition's queue.
func (c *conn) queued(t *ticket) {
	t.qOnce.Do(func() { close(t.queued) })
}

// done ends t's produce: the next one of the partition may start, and
// once the ones before it are stored, t counts as stored. It waits for
// those (they are ahead of it in the partition's queue), unless the
// connection is closing.
func (c *conn) done(t *ticket) {
	c.queued(t)
	t.sOnce.Do(func() {
		if t.prev != nil {
			select {
			case <-t.prev.stored:
			case <-c.ctx.Done():
			}
			t.prev = nil // let the tickets before it go
		}
		close(t.stored)
		c.tailsMu.Lock()
		if c.tails[t.key] == t {
			delete(c.tails, t.key)
		}
		c.tailsMu.Unlock()
	})
}

// order takes r's places in the connection's produce order (the reader
// calls it, in request order).
func (c *conn) order(r *request) {
	c.tailsMu.Lock()
	defer c.tailsMu.Unlock()
	switch req := r.req.(type) {
	case *kmsg.ProduceRequest:
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				key := tp{rt.Topic, rp.Partition}
				t := &ticket{key: key, prev: c.tails[key], queued: make(chan struct{}), stored: make(chan struct{})}
				c.tails[key] = t
				r.tickets = append(r.tickets, t)
			}
		}
	case *kmsg.FetchRequest:
		if len(c.tails) == 0 {
			return
		}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if t := c.tails[tp{rt.Topic, rp.Partition}]; t != nil {
					r.after = append(r.after, t.stored)
				}
			}
		}
	case *kmsg.ListOffsetsRequest:
		if len(c.tails) == 0 {
			return
		}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if t := c.tails[tp{rt.Topic, rp.Partition}]; t != nil {
					r.after = append(r.after, t.stored)
				}
			}
		}
	}
}

func (c *conn) serve() {
	queue := make(chan *pending, c.s.cfg.MaxInflight)
	writerDone := make(chan struct{})
	go c.write(queue, writerDone)
	defer func() {
		c.cancel()
		close(queue)
		<-writerDone
		c.inflight.Wait()
		_ = c.nc.Close()
	}()
	br := bufio.NewReaderSize(c.nc, 32<<10)
	var size [4]byte
	for {
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		// The size is checked before anything of the frame is allocated:
		// a request costs memory in proportion to what is accepted.
		if n < 8 || n > c.s.cfg.MaxRequestBytes {
			c.s.logger.Debug("kafka: request size out of bounds, closing", "remote", c.nc.RemoteAddr().String(), "size", n)
			return
		}
		// The request's bytes count against the server's bound until it
		// is answered.
		if err := c.s.inflightBytes.Acquire(c.ctx, int64(n)); err != nil {
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(br, buf); err != nil {
			c.s.inflightBytes.Release(int64(n))
			return
		}
		r, answer, ok := c.decode(buf)
		r.size = int64(n)
		if !ok {
			c.s.inflightBytes.Release(r.size)
			return
		}
		if c.s.cfg.RequireAuth && !preAuth(r.key) && !c.authenticated() {
			c.s.inflightBytes.Release(r.size)
			c.s.logger.Debug("kafka: request before SASL authentication, closing", "remote", c.nc.RemoteAddr().String(), "key", r.key)
			return
		}
		p := &pending{done: make(chan struct{})}
		select {
		case queue <- p:
		case <-c.ctx.Done():
			c.s.inflightBytes.Release(r.size)
			return
		}
		if answer != nil { // answered without a handler (ApiVersions' downgrade)
			c.s.inflightBytes.Release(r.size)
			p.frame = encodeResponse(r.corr, answer, false)
			close(p.done)
			continue
		}
		if concurrent(r.key) {
			c.order(r)
			c.inflight.Add(1)
			go func() {
				defer c.inflight.Done()
				c.run(r, p)
			}()
			continue
		}
		c.inflight.Wait()
		c.run(r, p)
		if p.fatal {
			return
		}
		if c.authFailed {
			return // after its answer (p.last)
		}
	}
}

// concurrent reports whether requests of key may run alongside the
// connection's other requests.
func concurrent(key int16) bool {
	switch key {
	case 0, 1, 2, 3: // Produce, Fetch, ListOffsets, Metadata
		return true
	}
	return false
}

// run handles one request and completes p.
func (c *conn) run(r *request, p *pending) {
	defer close(p.done)
	defer c.s.inflightBytes.Release(r.size)
	defer func() {
		// A bug answering one request closes its connection, not the
		// server.
		if v := recover(); v != nil {
			c.s.logger.Error("kafka: panic answering a request, closing the connection", "key", r.key, "version", r.version, "panic", v,
				"stack", string(debug.Stack()))
			p.frame, p.fatal = nil, true
		}
	}()
	// A produce that fails before reaching a partition still lets the
	// next one of the partition go (its connection is closing).
	defer func() {
		for _, t := range r.tickets {
			c.done(t)
		}
	}()
	for _, ch := range r.after {
		select {
		case <-ch:
		case <-c.ctx.Done():
			p.fatal = true
			return
		}
	}
	resp, err := c.handle(r)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			c.s.logger.Debug("kafka: closing connection", "remote", c.nc.RemoteAddr().String(), "key", r.key, "version", r.version, "err", err)
		}
		p.fatal = true
		return
	}
	if resp == nil {
		return // acks=0
	}
	p.frame = encodeResponse(r.corr, resp, resp.IsFlexible() && r.key != 18)
	p.last = c.authFailed
}

// write writes the responses in the order of queue.
func (c *conn) write(queue <-chan *pending, done chan<- struct{}) {
	defer close(done)
	bw := bufio.NewWriterSize(c.nc, 32<<10)
	failed := false
	for p := range queue {
		select {
		case <-p.done:
		default:
			// The next answer is not ready: what is written goes now,
			// rather than wait in the buffer behind it (a producer with
			// five requests in flight had its acknowledgements held
			// until its pipeline ran dry).
			if !failed && bw.Buffered() > 0 {
				if err := bw.Flush(); err != nil {
					failed = true
					c.cancel()
					_ = c.nc.Close()
				}
			}
			<-p.done
		}
		if failed {
			continue
		}
		if p.fatal {
			failed = true
			c.cancel()
			_ = c.nc.Close()
			continue
		}
		if p.frame == nil {
			continue
		}
		if _, err := bw.Write(p.frame); err != nil {
			failed = true
			c.cancel()
			_ = c.nc.Close()
			continue
		}
		if p.last {
			_ = bw.Flush()
			failed = true
			c.cancel()
			_ = c.nc.Close()
			continue
		}
		// Flush when nothing else is queued to go with it; a queued answer
		// that is not ready yet flushes this one before it waits (above).
		if len(queue) == 0 {
			if err := bw.Flush(); err != nil {
				failed = true
				c.cancel()
				_ = c.nc.Close()
			}
		}
	}
}

// decode parses a request frame. ok false closes the connection: the
// frame could not be read (an unknown key, a version this listener does
// not serve, a malformed body), as Kafka closes it. answer is set when
// the request is answered without a handler.
func (c *conn) decode(buf []byte) (r *request, answer kmsg.Response, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			c.s.logger.Error("kafka: panic decoding a request, closing the connection", "panic", v)
			ok = false
		}
	}()
	b := kbin.Reader{Src: buf}
	r = &request{key: b.Int16(), version: b.Int16(), corr: b.Int32()}
	req := kmsg.RequestForKey(r.key)
	if req == nil {
		c.s.logger.Debug("kafka: unknown api key, closing", "remote", c.nc.RemoteAddr().String(), "key", r.key)
		return r, nil, false
	}
	lo, hi, served := c.s.versions(r.key)
	if r.key == 18 && r.version > hi {
		// KIP-511: answer an ApiVersions request newer than served with
		// version 0 and UNSUPPORTED_VERSION, listing what is served, so
		// that the client retries with a version both know.
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.ErrorCode = errUnsupportedVersion
		resp.ApiKeys = c.s.apiKeys()
		return r, resp, true
	}
	if !served || r.version < lo || r.version > hi {
		c.s.logger.Debug("kafka: unsupported api version, closing", "remote", c.nc.RemoteAddr().String(), "key", r.key, "version", r.version)
		return r, nil, false
	}
	if cid := b.NullableString(); cid != nil {
		r.clientID = *cid
	}
	req.SetVersion(r.version)
	if req.IsFlexible() {
		kmsg.SkipTags(&b)
	}
	if !b.Ok() {
		return r, nil, false
	}
	if err := req.ReadFrom(b.Src); err != nil {
		c.s.logger.Debug("kafka: malformed request, closing", "remote", c.nc.RemoteAddr().String(), "key", r.key, "version", r.version, "err", err)
		return r, nil, false
	}
	r.req = req
	return r, nil, true
}

// encodeResponse frames resp: size, correlation id, the header's tagged
// fields when the header is flexible (every flexible response but
// ApiVersions'), the body.
func encodeResponse(corr int32, resp kmsg.Response, flexibleHeader bool) []byte {
	b := make([]byte, 8, 256)
	binary.BigEndian.PutUint32(b[4:], uint32(corr))
	if flexibleHeader {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func (c *conn) authenticated() bool {
	c.auth.mu.Lock()
	defer c.auth.mu.Unlock()
	return c.auth.tok != nil
}
