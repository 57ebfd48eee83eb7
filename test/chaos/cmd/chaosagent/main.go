// Command chaosagent is one worker process of the chaos harness
// (test/chaos): a producer, a group consumer, an enqueuer or a queue worker
// that runs against pgmsg until SIGTERM and appends what it was told by the
// database to a history file, one JSON object per line. The harness kills,
// pauses and restarts these processes while it breaks PostgreSQL and the
// network, then checks the histories against the database.
//
// Only acknowledgements are recorded as facts ("pub", "commit", "enq",
// "jdone"); an operation whose outcome is unknown (connection cut, server
// crash) is recorded as such ("puberr", "commiterr", ...) and the checker
// treats it as may-or-may-not have happened. Each line is written with one
// write(2), so kill -9 loses at most the events not yet written, never a
// half-written fact that looks complete.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/test/chaos"
)

var (
	flagURL      = flag.String("url", "", "PostgreSQL URL (through the harness's proxy)")
	flagRole     = flag.String("role", "", "producer | cproducer | aproducer | consumer | txconsumer | enqueuer | worker | kworker | hproducer | hconsumer | maint")
	flagName     = flag.String("name", "", "unique name of this incarnation (ids are prefixed with it)")
	flagOut      = flag.String("out", "", "history file (appended)")
	flagTopic    = flag.String("topic", "chaos", "topic")
	flagGroup    = flag.String("group", "g-run", "consumer group")
	flagGroup2   = flag.String("group2", "", "consumer: a second group consumed in the same process, whose claims of a partition go out gathered with the first group's, or take the records the first read from the record cache")
	flagQueue    = flag.String("queue", "chaos", "queue")
	flagRate     = flag.Int("rate", 200, "records or jobs per second (producers, enqueuer)")
	flagBatch    = flag.Int("batch", 10, "records or jobs per call")
	flagLease    = flag.Duration("lease", 2*time.Second, "claim / job lease")
	flagWork     = flag.Duration("work", 20*time.Millisecond, "max simulated work per claim or job")
	flagPoison   = flag.Float64("poison", 0.02, "fraction of jobs that always fail (end in dead-letter)")
	flagFlaky    = flag.Float64("flaky", 0.05, "probability that one attempt of a job fails")
	flagRelease  = flag.Float64("release", 0.02, "probability that a consumer releases a claim instead of committing")
	flagStmtTO   = flag.Duration("statement-timeout", 5*time.Second, "statement_timeout of the agent's sessions")
	flagLockTO   = flag.Duration("lock-timeout", time.Second, "lock_timeout of the agent's sessions")
	flagPoll     = flag.Duration("poll", 200*time.Millisecond, "consumer poll interval")
	flagNoNotify = flag.Bool("no-notify", false, "disable LISTEN/NOTIFY wake-ups")
	flagSession  = flag.Duration("session", 3*time.Second, "consumer group session timeout (member mode)")
	flagHTTP     = flag.String("http", "", "base URL of `pgmsg serve` (hproducer, hconsumer)")
	flagKinds    = flag.String("kinds", "", "enqueuer: also enqueue workflow, sequence and per-key limit jobs into this queue, one batch per tick")
	flagKindsMax = flag.Int("kinds-backlog", 0, "enqueuer: skip the kinds batches while the kinds queue holds more waiting jobs (available, scheduled, retrying, pending) than this (0: no bound)")
)

// history appends events to the history file, one line per write(2).
type history struct {
	mu sync.Mutex
	f  *os.File
}

func (h *history) write(evs ...map[string]any) {
	if len(evs) == 0 {
		return
	}
	now := time.Now().UnixNano()
	var buf []byte
	for _, ev := range evs {
		if _, ok := ev["t"]; !ok {
			ev["t"] = now
		}
		b, _ := json.Marshal(ev)
		buf = append(buf, b...)
		buf = append(buf, '\n')
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Write(buf); err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent: write history:", err)
		os.Exit(3)
	}
}

func main() {
	flag.Parse()
	if *flagURL == "" || *flagRole == "" || *flagName == "" || *flagOut == "" {
		fmt.Fprintln(os.Stderr, "chaosagent: -url, -role, -name and -out are required")
		os.Exit(2)
	}
	f, err := os.OpenFile(*flagOut, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(2)
	}
	h := &history{f: f}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	cfg, err := pgxpool.ParseConfig(*flagURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(2)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(flagStmtTO.Milliseconds())
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(flagLockTO.Milliseconds())
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaosagent " + *flagName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(2)
	}
	defer pool.Close()
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{
		ClaimLease: *flagLease, PollInterval: *flagPoll, DisableNotify: *flagNoNotify,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(2)
	}
	defer client.Close()

	h.write(map[string]any{"k": "start", "role": *flagRole, "name": *flagName, "pid": os.Getpid()})
	a := &agent{ctx: ctx, c: client, pool: pool, h: h}
	switch *flagRole {
	case "producer":
		a.produce(true)
	case "cproducer":
		a.produce(false)
	case "aproducer":
		a.produceAsync()
	case "consumer":
		a.consume()
	case "txconsumer":
		a.consumeTx()
	case "dlqconsumer":
		a.consumeDLQ()
	case "enqueuer":
		a.enqueue()
	case "worker":
		a.work()
	case "kworker":
		a.workKinds()
	case "hproducer":
		a.produceHTTP()
	case "hconsumer":
		a.consumeHTTP()
	case "maint":
		a.maintain()
	default:
		fmt.Fprintln(os.Stderr, "chaosagent: unknown role", *flagRole)
		os.Exit(2)
	}
	h.write(map[string]any{"k": "stop", "name": *flagName})
}

type agent struct {
	ctx  context.Context
	c    *pgmsg.Client
	pool *pgxpool.Pool
	h    *history
	seq  int
}

func (a *agent) nextID() string {
	a.seq++
	return fmt.Sprintf("%s-%d", *flagName, a.seq)
}

func errCode(err error) string {
	if c := pgmsg.ErrorCode(err); c != "" {
		return c
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return "io"
}

// pause sleeps d or until the agent is told to stop; false when stopping.
func (a *agent) pause(d time.Duration) bool {
	select {
	case <-a.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// ticker paces calls to rate items per second in batches of batch.
func interval() time.Duration {
	return time.Duration(float64(time.Second) * float64(*flagBatch) / float64(max(*flagRate, 1)))
}

type payload struct {
	ID     string `json:"id"`
	Poison bool   `json:"poison,omitempty"`
}

// retryIdempotent sends an idempotent publish until it is answered, fails
// with an error a retry cannot change (final), the agent stops or a minute
// has passed, and returns how many times it sent it again. A retry of a
// batch whose first attempt was stored after all is answered as a
// duplicate: the checker's log-duplicate count stays 0.
func (a *agent) retryIdempotent(publish func(context.Context) error, final func(error) bool) (int, error) {
	deadline := time.Now().Add(time.Minute)
	pause := 100 * time.Millisecond
	for retries := 0; ; retries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := publish(ctx)
		cancel()
		a.noteDiskFull("pub", err)
		if err == nil || final(err) || time.Now().After(deadline) || !a.pause(pause) {
			return retries, err
		}
		pause = min(2*pause, time.Second)
	}
}

// noteDiskFull records an attempt refused because the volume was full
// (PM021): its statement was rolled back, nothing of it is stored.
func (a *agent) noteDiskFull(what string, err error) {
	if errors.Is(err, pgmsg.ErrDiskFull) {
		a.h.write(map[string]any{"k": "full", "kind": what, "code": errCode(err)})
	}
}

// retryDiskFull calls fn until it succeeds, fails otherwise than with a
// full volume, the agent stops or a minute has passed: a call refused
// with PM021 stored nothing (its transaction was rolled back), so even a
// call that is not idempotent may be sent again.
func (a *agent) retryDiskFull(what string, fn func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	pause := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := fn(ctx)
		cancel()
		a.noteDiskFull(what, err)
		if !errors.Is(err, pgmsg.ErrDiskFull) || time.Now().After(deadline) || !a.pause(pause) {
			return err
		}
		pause = min(2*pause, time.Second)
	}
}

// produce publishes batches with Client.PublishIdempotent (one transaction
// per call) as producer <name>, retrying a batch whose outcome is unknown
// with the same sequence. Half of the batches are keyed (spread by hash),
// half unkeyed. Unless idempotent, it publishes with Client.Publish, once
// per batch (an unknown outcome is not retried, so that nothing is stored
// twice): batches of at least store.CopyMinRecords records go with COPY.
func (a *agent) produce(idempotent bool) {
	producerID := *flagName // one per process start
	var seq int64
	tick := time.NewTicker(interval())
	defer tick.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-tick.C:
		}
		recs := make([]*pgmsg.Record, *flagBatch)
		keyed := rand.IntN(2) == 0
		for i := range recs {
			id := a.nextID()
			v, _ := json.Marshal(payload{ID: id})
			recs[i] = &pgmsg.Record{Topic: *flagTopic, Value: v}
			if keyed {
				recs[i].Key = []byte(id)
			}
		}
		tried := make([]string, len(recs))
		for i, r := range recs {
			tried[i] = idOf(r.Value)
		}
		// Written before the call: a process killed mid-publish leaves
		// records the checker must know were attempted.
		a.h.write(map[string]any{"k": "pubtry", "ids": tried})
		var dup bool
		var retries int
		var err error
		if idempotent {
			retries, err = a.retryIdempotent(func(ctx context.Context) error {
				var err error
				dup, err = a.c.PublishIdempotent(ctx, producerID, seq, recs, nil)
				return err
			}, func(err error) bool { return pgmsg.IsInputError(err) || errors.Is(err, pgmsg.ErrOutOfOrderSequence) })
			seq += int64(len(recs))
		} else {
			err = a.retryDiskFull("pub", func(ctx context.Context) error { return a.c.Publish(ctx, recs, nil) })
		}
		if err != nil {
			ids := make([]string, len(recs))
			for i, r := range recs {
				ids[i] = idOf(r.Value)
			}
			a.h.write(map[string]any{"k": "puberr", "ids": ids, "code": errCode(err), "err": err.Error()})
			a.pause(100 * time.Millisecond)
			continue
		}
		evs := make([]map[string]any, len(recs))
		for i, r := range recs {
			evs[i] = map[string]any{"k": "pub", "id": idOf(r.Value), "p": r.Partition, "o": r.Offset}
		}
		if retries > 0 {
			evs = append(evs, map[string]any{"k": "pubretried", "n": len(recs), "dup": dup})
		}
		a.h.write(evs...)
	}
}

// produceAsync publishes through an idempotent Producer (client-side
// batching, batches retried after unknown outcomes), one promise per
// record.
func (a *agent) produceAsync() {
	p, err := a.c.NewProducer(&pgmsg.ProducerConfig{Linger: 5 * time.Millisecond, RequestTimeout: 10 * time.Second,
		Idempotent: true, ProducerID: *flagName, DeliveryTimeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(2)
	}
	defer p.Close(context.Background())
	tick := time.NewTicker(interval())
	defer tick.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-tick.C:
		}
		ids := make([]string, *flagBatch)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%d", *flagName, a.seq+1+i)
		}
		a.h.write(map[string]any{"k": "pubtry", "ids": ids})
		for range *flagBatch {
			id := a.nextID()
			v, _ := json.Marshal(payload{ID: id})
			rec := &pgmsg.Record{Topic: *flagTopic, Value: v}
			if rand.IntN(2) == 0 {
				rec.Key = []byte(id)
			}
			p.Produce(a.ctx, rec, func(r *pgmsg.Record, err error) {
				if err != nil {
					a.h.write(map[string]any{"k": "puberr", "ids": []string{id}, "code": errCode(err), "err": err.Error()})
					return
				}
				a.h.write(map[string]any{"k": "pub", "id": id, "p": r.Partition, "o": r.Offset})
			})
		}
	}
}

func idOf(v []byte) string {
	var p payload
	_ = json.Unmarshal(v, &p)
	return p.ID
}

// consume claims with Consumer.Poll (notifications + polling), "works",
// and commits; now and then it releases instead. Every received record and
// every commit outcome is recorded with the claim's epoch.
func (a *agent) consume() {
	if *flagGroup2 == "" {
		a.consumeGroup(*flagGroup)
		return
	}
	// Report the claims gathered with the other group's and the records
	// claims took from the record cache, now and then (a killed agent
	// loses at most the last second's).
	go func() {
		var sent, sentCached int64
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-a.ctx.Done():
				return
			case <-t.C:
			}
			if n := a.c.GatheredClaims(); n > sent {
				a.h.write(map[string]any{"k": "gathered", "n": n - sent})
				sent = n
			}
			if n := a.c.CachedRecordsServed(); n > sentCached {
				a.h.write(map[string]any{"k": "cached", "n": n - sentCached})
				sentCached = n
			}
		}
	}()
	var wg sync.WaitGroup
	for _, g := range []string{*flagGroup, *flagGroup2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.consumeGroup(g)
		}()
	}
	wg.Wait()
}

// consumeGroup is consume for one group.
func (a *agent) consumeGroup(group string) {
	cn, err := a.c.NewConsumer(*flagTopic, group, &pgmsg.ConsumerOpts{
		Claim:    pgmsg.ClaimOpts{MaxRecords: 50, Lease: *flagLease, Member: *flagName},
		MemberID: *flagName, SessionTimeout: *flagSession, HeartbeatInterval: *flagSession / 6,
		OnLost: func(topic string, parts []int32) {
			a.h.write(map[string]any{"k": "lost", "g": group, "m": *flagName, "parts": parts})
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(2)
	}
	defer cn.Close()
	for {
		cl, err := cn.Poll(a.ctx)
		if a.ctx.Err() != nil {
			return
		}
		if err != nil {
			a.h.write(map[string]any{"k": "claimerr", "g": group, "code": errCode(err), "err": err.Error()})
			a.pause(100 * time.Millisecond)
			continue
		}
		a.recordClaim(cl)
		a.pause(time.Duration(rand.Int64N(int64(*flagWork) + 1)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sent := time.Now().UnixNano()
		if rand.Float64() < *flagRelease {
			err = a.c.Release(ctx, cl)
			cancel()
			a.h.write(map[string]any{"k": "release", "g": group, "m": *flagName, "p": cl.Partition, "e": cl.Epoch, "ok": err == nil})
			continue
		}
		err = a.c.Commit(ctx, cl)
		cancel()
		ev := map[string]any{"g": group, "m": *flagName, "p": cl.Partition, "e": cl.Epoch,
			"from": cl.Records[0].Offset, "to": cl.Records[len(cl.Records)-1].Offset, "sent": sent}
		if err != nil {
			ev["k"], ev["code"], ev["err"] = "commiterr", errCode(err), err.Error()
		} else {
			ev["k"] = "commit"
		}
		a.h.write(ev)
	}
}

// consumeDLQ runs Consumer.Run with MaxDeliveries: its handler fails on
// every poison record (chaos.PoisonRecord), which Run must set aside in
// the dead-letter topic exactly once, and records each other record it
// handled ("dlqh"; at least once each).
func (a *agent) consumeDLQ() {
	cn, err := a.c.NewConsumer(*flagTopic, *flagGroup, &pgmsg.ConsumerOpts{
		Claim:    pgmsg.ClaimOpts{MaxRecords: 20, Lease: *flagLease, Member: *flagName},
		MemberID: *flagName, SessionTimeout: *flagSession, HeartbeatInterval: *flagSession / 6,
		MaxDeliveries: 3, RedeliveryBackoff: 10 * time.Millisecond, RedeliveryBackoffMax: 100 * time.Millisecond,
		OnLost: func(topic string, parts []int32) {
			a.h.write(map[string]any{"k": "lost", "g": *flagGroup, "m": *flagName, "parts": parts})
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(2)
	}
	defer cn.Close()
	for a.ctx.Err() == nil {
		err := cn.Run(a.ctx, func(_ context.Context, cl *pgmsg.Claim) error {
			for _, r := range cl.Records {
				if id := idOf(r.Value); chaos.PoisonRecord(id) {
					return fmt.Errorf("chaos: poison record %s", id)
				}
			}
			a.pause(time.Duration(rand.Int64N(int64(*flagWork) + 1)))
			evs := make([]map[string]any, len(cl.Records))
			for i, r := range cl.Records {
				evs[i] = map[string]any{"k": "dlqh", "g": cl.Group, "m": *flagName, "p": r.Partition, "o": r.Offset, "id": idOf(r.Value)}
			}
			a.h.write(evs...)
			return nil
		})
		if a.ctx.Err() == nil {
			// Not transient (Run retries those): say so and start again.
			a.h.write(map[string]any{"k": "runerr", "g": *flagGroup, "code": errCode(err), "err": fmt.Sprint(err)})
			a.pause(200 * time.Millisecond)
		}
	}
}

func (a *agent) recordClaim(cl *pgmsg.Claim) {
	now := time.Now().UnixNano()
	evs := make([]map[string]any, len(cl.Records))
	for i, r := range cl.Records {
		evs[i] = map[string]any{"k": "recv", "g": cl.Group, "m": *flagName, "p": r.Partition, "o": r.Offset,
			"e": cl.Epoch, "id": idOf(r.Value), "t": now}
	}
	a.h.write(evs...)
}

// consumeTx runs Consumer.ProcessTx: the handler writes one effect row per
// record (table chaos_effect) in the transaction that commits the cursor,
// so the effects must hold every offset exactly once. Only committed
// transactions are recorded.
func (a *agent) consumeTx() {
	cn, err := a.c.NewConsumer(*flagTopic, *flagGroup, &pgmsg.ConsumerOpts{
		Claim:    pgmsg.ClaimOpts{MaxRecords: 50, Member: *flagName},
		MemberID: *flagName, SessionTimeout: *flagSession, HeartbeatInterval: *flagSession / 6,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(2)
	}
	defer cn.Close()
	for a.ctx.Err() == nil {
		var got *pgmsg.Claim
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sent := time.Now().UnixNano()
		ok, err := cn.ProcessTx(ctx, func(ctx context.Context, tx pgx.Tx, cl *pgmsg.Claim) error {
			got = cl
			offs := make([]int64, len(cl.Records))
			ids := make([]string, len(cl.Records))
			for i, r := range cl.Records {
				offs[i], ids[i] = r.Offset, idOf(r.Value)
			}
			_, err := tx.Exec(ctx, `INSERT INTO public.chaos_effect (grp, partition, "offset", id)
				SELECT $1, $2, o, i FROM unnest($3::bigint[], $4::text[]) AS u(o, i)`, cl.Group, cl.Partition, offs, ids)
			if err == nil {
				time.Sleep(time.Duration(rand.Int64N(int64(*flagWork) + 1)))
			}
			return err
		})
		cancel()
		switch {
		case err != nil:
			a.h.write(map[string]any{"k": "commiterr", "g": *flagGroup, "m": *flagName, "tx": true, "code": errCode(err), "err": err.Error()})
			a.pause(100 * time.Millisecond)
		case !ok:
			a.pause(*flagPoll)
		default:
			a.recordClaim(got)
			a.h.write(map[string]any{"k": "commit", "g": *flagGroup, "m": *flagName, "p": got.Partition, "e": got.Epoch,
				"from": got.Records[0].Offset, "to": got.Records[len(got.Records)-1].Offset, "sent": sent, "tx": true})
		}
	}
}

// enqueue adds jobs with EnqueueMany; a few are poison (always fail).
func (a *agent) enqueue() {
	tick := time.NewTicker(interval())
	defer tick.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-tick.C:
		}
		params := make([]pgmsg.EnqueueParams, *flagBatch)
		uids := make([]string, len(params))
		poison := make([]bool, len(params))
		for i := range params {
			uids[i] = a.nextID()
			poison[i] = rand.Float64() < *flagPoison
			b, _ := json.Marshal(payload{ID: uids[i], Poison: poison[i]})
			params[i] = pgmsg.EnqueueParams{Payload: b, Kind: "chaos", MaxAttempts: 3}
		}
		a.h.write(map[string]any{"k": "enqtry", "uids": uids})
		var res []*pgmsg.EnqueueResult
		err := a.retryDiskFull("enq", func(ctx context.Context) error {
			var err error
			res, err = a.c.EnqueueMany(ctx, *flagQueue, params, nil)
			return err
		})
		if err != nil {
			a.h.write(map[string]any{"k": "enqerr", "uids": uids, "code": errCode(err), "err": err.Error()})
			a.pause(100 * time.Millisecond)
			continue
		}
		evs := make([]map[string]any, len(res))
		for i, r := range res {
			evs[i] = map[string]any{"k": "enq", "jid": r.ID, "uid": uids[i], "poison": poison[i]}
		}
		a.h.write(evs...)
		if *flagKinds != "" {
			a.enqueueKinds()
		}
	}
}

// kindsTick numbers the enqueuer's kinds batches.
var kindsTick int

// enqueueKinds enqueues one batch into the kinds queue, in one statement:
// a workflow (a diamond: a, then b and c, then d), three jobs of one of
// the enqueuer's three sequences (they continue past a dead job, so that
// the run drains), and four jobs of one of three limit keys shared by
// every enqueuer (the key in the payload's "lk" too: the archive keeps no
// limit key). No poison: only flaky attempts fail.
func (a *agent) enqueueKinds() {
	if a.kindsBacklogged() {
		return
	}
	kindsTick++
	var params []pgmsg.EnqueueParams
	var kinds, uids []string
	add := func(kind string, p pgmsg.EnqueueParams, lk string) {
		uid := a.nextID()
		b, _ := json.Marshal(map[string]string{"id": uid, "lk": lk})
		p.Payload, p.Kind, p.MaxAttempts = b, kind, 3
		params = append(params, p)
		kinds, uids = append(kinds, kind), append(uids, uid)
	}
	w := pgmsg.NewWorkflow().
		Add("a", pgmsg.EnqueueParams{}).
		Add("b", pgmsg.EnqueueParams{}, "a").
		Add("c", pgmsg.EnqueueParams{}, "a").
		Add("d", pgmsg.EnqueueParams{}, "b", "c")
	for _, p := range w.Params() {
		add("wf", p, "")
	}
	seq := fmt.Sprintf("s-%s-%d", *flagName, kindsTick%3)
	for range 3 {
		add("seq", pgmsg.EnqueueParams{SequenceKey: seq, SequenceContinue: true}, "")
	}
	lk := fmt.Sprintf("k%d", kindsTick%3)
	for range 4 {
		add("lim", pgmsg.EnqueueParams{LimitKey: lk}, lk)
	}
	a.h.write(map[string]any{"k": "kenqtry", "uids": uids})
	var res []*pgmsg.EnqueueResult
	err := a.retryDiskFull("enq", func(ctx context.Context) error {
		var err error
		res, err = a.c.EnqueueMany(ctx, *flagKinds, params, nil)
		return err
	})
	if err != nil {
		a.h.write(map[string]any{"k": "kenqerr", "uids": uids, "code": errCode(err), "err": err.Error()})
		return
	}
	evs := make([]map[string]any, len(res))
	for i, r := range res {
		evs[i] = map[string]any{"k": "kenq", "jid": r.ID, "uid": uids[i], "kind": kinds[i]}
	}
	a.h.write(evs...)
}

// kindsBackoff is the enqueuer's view of the kinds queue's backlog:
// when it was last counted, whether it was above -kinds-backlog then,
// and the batches skipped since the last kskip event.
var kindsBackoff struct {
	checked time.Time
	over    bool
	skipped int
}

// kindsBacklogged reports whether the kinds queue's waiting jobs
// (available, scheduled, retrying, pending) were above -kinds-backlog at
// the last count, counting again at most once a second; a batch it stops
// is counted as skipped. The kworkers run fewer jobs a second under
// faults than the enqueuers add: without the bound the backlog grows
// through the whole fault phase and the drain cannot finish it. Once a
// second it records the batches skipped since the last time (kskip), so
// the run reports them. A count that fails (the server down) keeps the
// last answer.
func (a *agent) kindsBacklogged() bool {
	bound := *flagKindsMax
	if bound <= 0 {
		return false
	}
	if time.Since(kindsBackoff.checked) >= time.Second {
		kindsBackoff.checked = time.Now()
		ctx, cancel := context.WithTimeout(a.ctx, 2*time.Second)
		var n int
		err := a.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM pgmsg.job
			WHERE queue_id = (SELECT queue_id FROM pgmsg.queue WHERE name = $1)
			  AND state IN ('available', 'scheduled', 'retrying', 'pending') LIMIT $2) b`, *flagKinds, bound+1).Scan(&n)
		cancel()
		if err == nil {
			kindsBackoff.over = n > bound
		}
		if kindsBackoff.skipped > 0 {
			a.h.write(map[string]any{"k": "kskip", "n": kindsBackoff.skipped})
			kindsBackoff.skipped = 0
		}
	}
	if kindsBackoff.over {
		kindsBackoff.skipped++
	}
	return kindsBackoff.over
}

// claimRound is one round of a worker loop (work, workKinds) up to the
// handling: it claims up to 10 jobs of the queue, records their starts
// (prefix+"run"; with the claim's attempted_at when withAt) and waits the
// work time, then returns them. After a failed claim (recorded as
// prefix+"claimerr") or an empty one it pauses and returns none.
func (a *agent) claimRound(prefix string, withAt bool) []*pgmsg.Job {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	jobs, err := a.c.ClaimJobs(ctx, *flagQueue, &pgmsg.ClaimJobsOpts{Max: 10, Lease: *flagLease, Worker: *flagName})
	cancel()
	if err != nil {
		a.h.write(map[string]any{"k": prefix + "claimerr", "code": errCode(err), "err": err.Error()})
		a.pause(100 * time.Millisecond)
		return nil
	}
	if len(jobs) == 0 {
		a.pause(*flagPoll)
		return nil
	}
	evs := make([]map[string]any, len(jobs))
	for i, j := range jobs {
		evs[i] = map[string]any{"k": prefix + "run", "jid": j.ID, "tok": j.LeaseToken, "att": j.Attempt, "m": *flagName}
		if withAt && j.AttemptedAt != nil {
			evs[i]["at"] = j.AttemptedAt.UnixNano()
		}
	}
	a.h.write(evs...)
	a.pause(time.Duration(rand.Int64N(int64(*flagWork) + 1)))
	return jobs
}

// workKinds works the kinds queue as work does the plain one, recording
// each claim's attempted_at (the database's clock) with its start: the
// checker compares it with the finishes of the jobs it had to wait for.
func (a *agent) workKinds() {
	for a.ctx.Err() == nil {
		for _, j := range a.claimRound("k", true) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if rand.Float64() < *flagFlaky {
				_, err := a.c.Fail(ctx, j, fmt.Errorf("chaos: attempt %d failed", j.Attempt), &pgmsg.FailOpts{RetryIn: 50 * time.Millisecond})
				ev := map[string]any{"k": "kfail", "jid": j.ID, "tok": j.LeaseToken, "m": *flagName}
				if err != nil {
					ev["code"], ev["err"] = errCode(err), err.Error()
				}
				a.h.write(ev)
			} else {
				err := a.c.Complete(ctx, j)
				ev := map[string]any{"k": "kdone", "jid": j.ID, "tok": j.LeaseToken, "m": *flagName}
				if err != nil {
					ev["k"], ev["code"], ev["err"] = "kdoneerr", errCode(err), err.Error()
				}
				a.h.write(ev)
			}
			cancel()
		}
	}
}

// work claims jobs, "works", and completes them; flaky attempts and poison
// jobs fail (poison ones until they are dead).
func (a *agent) work() {
	for a.ctx.Err() == nil {
		for _, j := range a.claimRound("j", false) {
			var p payload
			_ = json.Unmarshal(j.Payload, &p)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if p.Poison || rand.Float64() < *flagFlaky {
				res, err := a.c.Fail(ctx, j, fmt.Errorf("chaos: attempt %d failed (poison=%v)", j.Attempt, p.Poison),
					&pgmsg.FailOpts{RetryIn: 50 * time.Millisecond})
				ev := map[string]any{"k": "jfail", "jid": j.ID, "tok": j.LeaseToken, "m": *flagName}
				if err != nil {
					ev["k"], ev["code"], ev["err"] = "jfailerr", errCode(err), err.Error()
				} else {
					ev["state"] = string(res.State)
				}
				a.h.write(ev)
			} else {
				sent := time.Now().UnixNano()
				err := a.c.Complete(ctx, j)
				ev := map[string]any{"k": "jdone", "jid": j.ID, "tok": j.LeaseToken, "m": *flagName, "sent": sent}
				if err != nil {
					ev["k"], ev["code"], ev["err"] = "jdoneerr", errCode(err), err.Error()
				}
				a.h.write(ev)
			}
			cancel()
		}
	}
}

// maintain takes part in the maintenance leader election
// (Client.RunMaintenance) until the agent stops, again after each error,
// and records each run it made as leader.
func (a *agent) maintain() {
	for a.ctx.Err() == nil {
		err := a.c.RunMaintenance(a.ctx, &pgmsg.MaintenanceConfig{Interval: 500 * time.Millisecond,
			OnRun: func(*pgmsg.MaintenanceResult) { a.h.write(map[string]any{"k": "maint"}) }})
		if a.ctx.Err() == nil {
			a.h.write(map[string]any{"k": "mainterr", "code": errCode(err), "err": fmt.Sprint(err)})
			a.pause(200 * time.Millisecond)
		}
	}
}
