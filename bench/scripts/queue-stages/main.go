// Command queue-stages splits the queue's enqueue-to-completion latency
// into its stages (docs/benchmarks.md): the EnqueueMany call,
// from its return to the handler's start (notification, wake-up, claim),
// and from the handler's start to the completion's commit. It feeds one
// queue at a steady rate in batches, as `pgmsg bench queue --rate` does,
// with one Worker in the same process, and prints p50/p90/p99/p99.9 of
// each stage over the measured window; jobs slower than -slow end to end
// are listed in the -slow-file, by enqueue time, to show whether slow
// jobs cluster.
//
//	go run ./bench/scripts/queue-stages -url postgres://... -rate 1000 -duration 15s
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

type times struct{ t0, enqueued, started, done time.Time }

func main() {
	url := flag.String("url", os.Getenv("DATABASE_URL"), "PostgreSQL URL")
	schema := flag.String("schema", "pgmsg_stages", "schema to migrate and use")
	rate := flag.Int("rate", 1000, "jobs per second, enqueued every 10ms")
	workers := flag.Int("workers", 16, "worker concurrency")
	poll := flag.Duration("poll", 10*time.Millisecond, "client poll interval (as pgmsg bench)")
	warmup := flag.Duration("warmup", 2*time.Second, "unmeasured start")
	duration := flag.Duration("duration", 15*time.Second, "measured window")
	slow := flag.Duration("slow", 9*time.Millisecond, "list jobs slower than this end to end")
	slowFile := flag.String("slow-file", "", "file for the slow jobs (none if empty)")
	flag.Parse()
	if err := run(*url, *schema, *rate, *workers, *poll, *warmup, *duration, *slow, *slowFile); err != nil {
		log.Fatal(err)
	}
}

func run(url, schema string, rate, workers int, poll, warmup, duration, slow time.Duration, slowFile string) error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(workers + 4)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	c, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: schema, PollInterval: poll})
	if err != nil {
		return err
	}
	defer c.Close()
	queue := fmt.Sprintf("stages-%d", time.Now().UnixNano())
	if _, err := c.CreateQueue(ctx, queue, pgmsg.QueueConfig{}); err != nil {
		return err
	}
	defer func() { _ = c.DeleteQueue(context.WithoutCancel(ctx), queue, true) }()

	var mu sync.Mutex
	jobs := map[int64]*times{}
	get := func(id int64) *times {
		t := jobs[id]
		if t == nil {
			t = &times{}
			jobs[id] = t
		}
		return t
	}
	w, err := c.NewWorker(queue, func(_ context.Context, j *pgmsg.Job) error {
		now := time.Now()
		mu.Lock()
		get(j.ID).started = now
		mu.Unlock()
		return nil
	}, &pgmsg.WorkerOpts{Concurrency: workers, OnCompleted: func(js []*pgmsg.Job) {
		now := time.Now()
		mu.Lock()
		for _, j := range js {
			get(j.ID).done = now
		}
		mu.Unlock()
	}})
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()

	per := max(1, rate/100)
	params := make([]pgmsg.EnqueueParams, per)
	for i := range params {
		params[i].Payload = make([]byte, 1024)
	}
	measured := time.Now().Add(warmup)
	end := measured.Add(duration)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		<-tick.C
		t0 := time.Now()
		for i := range params {
			binary.BigEndian.PutUint64(params[i].Payload, uint64(t0.UnixNano()))
		}
		res, err := c.EnqueueMany(ctx, queue, params, &pgmsg.EnqueueOpts{DisableCreateQueue: true})
		t1 := time.Now()
		if err != nil {
			stop()
			return err
		}
		mu.Lock()
		for _, r := range res {
			t := get(r.ID)
			t.t0, t.enqueued = t0, t1
		}
		mu.Unlock()
	}
	time.Sleep(time.Second)
	stop()
	if err := <-werr; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	var enq, wake, handle, total []float64
	var slowLines []string
	mu.Lock()
	for _, t := range jobs {
		if t.t0.Before(measured) || t.done.IsZero() || t.started.IsZero() {
			continue
		}
		enq = append(enq, ms(t.enqueued.Sub(t.t0)))
		wake = append(wake, ms(t.started.Sub(t.enqueued)))
		handle = append(handle, ms(t.done.Sub(t.started)))
		total = append(total, ms(t.done.Sub(t.t0)))
		if t.done.Sub(t.t0) > slow {
			slowLines = append(slowLines, fmt.Sprintf("%8.3fs enqueue %6.2f wake %6.2f handle %6.2f ms",
				t.t0.Sub(measured).Seconds(), ms(t.enqueued.Sub(t.t0)), ms(t.started.Sub(t.enqueued)), ms(t.done.Sub(t.started))))
		}
	}
	mu.Unlock()
	if len(total) == 0 {
		return errors.New("no job completed in the measured window")
	}
	for _, s := range []struct {
		name string
		v    []float64
	}{{"enqueue call", enq}, {"to handler start", wake}, {"to completion commit", handle}, {"end to end", total}} {
		slices.Sort(s.v)
		q := func(p float64) float64 { return s.v[int(p*float64(len(s.v)-1))] }
		fmt.Printf("%-22s jobs %6d  p50 %6.2f  p90 %6.2f  p99 %6.2f  p99.9 %6.2f  max %6.2f ms\n",
			s.name, len(s.v), q(.5), q(.9), q(.99), q(.999), s.v[len(s.v)-1])
	}
	if slowFile != "" {
		slices.Sort(slowLines)
		f, err := os.Create(slowFile)
		if err != nil {
			return err
		}
		for _, l := range slowLines {
			fmt.Fprintln(f, l)
		}
		return f.Close()
	}
	return nil
}
