package kafkasrv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"
)

// SessionTimeoutDefault is Config.SessionTimeout's default.
const SessionTimeoutDefault = 10 * time.Second

// registry is this listener's membership of the cluster (Config.Cluster):
// its row of kafka_broker, renewed every session timeout / 4, and the
// live brokers read at the same pace. A broker whose row is not renewed
// within its session timeout is dropped from every listener's view at
// their next read: its partitions and groups move within
// 1.25 session timeouts.
type registry struct {
	s        *Server
	instance string
	timeout  time.Duration
	nodeID   atomic.Int32
	view     atomic.Pointer[clusterView]
	stop     context.CancelFunc
	done     chan struct{}
	// stopped without leaving (tests: a killed process)
	abandon atomic.Bool
}

func newInstanceID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startRegistry registers the listener and starts its heartbeat.
func (s *Server) startRegistry() error {
	r := &registry{s: s, instance: newInstanceID(), timeout: s.cfg.SessionTimeout, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(s.ctx, r.timeout)
	defer cancel()
	if err := r.register(ctx); err != nil {
		return err
	}
	if err := r.refresh(ctx); err != nil {
		return err
	}
	var lctx context.Context
	lctx, r.stop = context.WithCancel(s.ctx)
	go r.loop(lctx)
	s.registry.Store(r)
	return nil
}

// register takes Config.NodeID, or with NodeID -1 the smallest node id no
// live broker holds.
func (r *registry) register(ctx context.Context) error {
	s := r.s
	for attempt := 0; attempt < 100; attempt++ {
		id := s.cfg.NodeID
		if id < 0 {
			_, live, err := s.store.KafkaBrokers(ctx, s.client.Pool())
			if err != nil {
				return err
			}
			held := map[int32]bool{}
			for _, b := range live {
				held[b.NodeID] = true
			}
			for id = 0; held[id]; id++ {
			}
		}
		host, port := s.advertised()
		ok, err := s.store.KafkaBrokerRegister(ctx, s.client.Pool(), id, host, port, r.instance, r.timeout)
		if err != nil {
			return err
		}
		if ok {
			r.nodeID.Store(id)
			return nil
		}
		if s.cfg.NodeID >= 0 {
			return fmt.Errorf("kafkasrv: node id %d is held by a live listener", id)
		}
	}
	return fmt.Errorf("kafkasrv: no free node id")
}

func (r *registry) refresh(ctx context.Context) error {
	_, live, err := r.s.store.KafkaBrokers(ctx, r.s.client.Pool())
	if err != nil {
		return err
	}
	v := &clusterView{}
	self := r.nodeID.Load()
	hasSelf := false
	for _, b := range live {
		v.brokers = append(v.brokers, broker{id: b.NodeID, host: b.Host, port: b.Port})
		hasSelf = hasSelf || b.NodeID == self
	}
	if !hasSelf { // until the next heartbeat renews it
		host, port := r.s.advertised()
		v.brokers = insertBroker(v.brokers, broker{id: self, host: host, port: port})
	}
	r.view.Store(v)
	return nil
}

func insertBroker(bs []broker, b broker) []broker {
	i := 0
	for i < len(bs) && bs[i].id < b.id {
		i++
	}
	bs = append(bs, broker{})
	copy(bs[i+1:], bs[i:])
	bs[i] = b
	return bs
}

func (r *registry) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.timeout / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if !r.abandon.Load() {
				lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := r.s.store.KafkaBrokerLeave(lctx, r.s.client.Pool(), r.nodeID.Load(), r.instance); err != nil {
					r.s.logger.Warn("kafka: leaving the broker registry", "err", err)
				}
				cancel()
			}
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, r.timeout/2)
		ok, err := r.s.store.KafkaBrokerHeartbeat(hctx, r.s.client.Pool(), r.nodeID.Load(), r.instance)
		if err == nil && !ok {
			// The session ended (a long pause, a lost database) and
			// another listener took the node id: register again.
			r.s.logger.Warn("kafka: lost the broker registration, registering again", "node_id", r.nodeID.Load())
			err = r.register(hctx)
		}
		if err == nil {
			err = r.refresh(hctx)
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			r.s.logger.Warn("kafka: broker registry heartbeat", "err", err)
		}
	}
}

func (r *registry) close() {
	r.stop()
	<-r.done
}

// liveBrokers is the registry's view, or nil without a registry.
func (s *Server) liveView() *clusterView {
	r := s.registry.Load()
	if r == nil {
		return nil
	}
	return r.view.Load()
}
