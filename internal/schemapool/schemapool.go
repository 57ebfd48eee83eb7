// Package schemapool keeps migrated pgmsg schemas ready for tests.
//
// Migrating a schema (pgmsgmigrate.Up: every versioned migration and every
// function file) takes a few hundred milliseconds of the server's time, and
// dropping it again a fraction of that; a test that migrates its schema
// itself waits for both. A Pool migrates schemas in the background instead,
// a bounded number at once, ahead of demand, and drops the schemas tests
// are done with in the background too. Every schema is handed out once,
// freshly migrated, and dropped after use: none is ever reused.
//
// How far ahead the pool works grows with demand: none before the first
// Take (which migrates its schema while it waits), then as many schemas as
// were taken so far, up to Options.Ahead. A test binary with one test thus
// migrates one spare schema at most, one with hundreds keeps Ahead ready.
//
// A schema's name cannot be changed after it is migrated (the name is baked
// into its functions and its roles), so the pool names each schema when it
// starts migrating it.
package schemapool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// Options tune a Pool; zero values mean defaults.
type Options struct {
	// Prefix of the schemas' names, which end in a counter and random hex.
	// Default "pgmsg_t".
	Prefix string
	// Name, if set, names the schemas instead (Prefix is then unused). Its
	// names must be unique and valid (pgmsgmigrate.ValidateSchema).
	Name func() string
	// Workers is how many schemas are migrated (and, separately, dropped)
	// at once. Default 2.
	Workers int
	// Ahead is the most schemas kept migrated and unclaimed. Default 4.
	Ahead int
}

// Pool hands out freshly migrated schemas of one database. Its methods are
// safe for concurrent use.
type Pool struct {
	admin   *pgxpool.Pool
	opts    Options
	ctx     context.Context // cancelled by Close: stops migrations
	cancel  context.CancelFunc
	counter atomic.Int64
	drops   chan struct{} // a semaphore: drops running
	migWG   sync.WaitGroup
	dropWG  sync.WaitGroup

	mu        sync.Mutex
	ready     []string
	migrating int
	taken     int
	waiting   int
	changed   chan struct{} // closed (and replaced) when ready or err changes
	err       error         // the first failed migration: every Take fails after it
	dropErrs  []error
	closed    bool
}

// New returns a Pool that migrates schemas in the database of cfg, on a
// pool of its own (cfg is copied; at most 2*Workers connections).
// Migrations and drops commit without waiting for the WAL to be flushed
// (synchronous_commit off for the pool's sessions): a test schema need not
// survive a crash of the server.
func New(ctx context.Context, cfg *pgxpool.Config, opts Options) (*Pool, error) {
	if opts.Prefix == "" {
		opts.Prefix = "pgmsg_t"
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Ahead <= 0 {
		opts.Ahead = 4
	}
	c := cfg.Copy()
	c.MaxConns = int32(2 * opts.Workers)
	c.MinConns = 0
	c.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	c.ConnConfig.RuntimeParams["application_name"] = "pgmsg schemapool"
	admin, err := pgxpool.NewWithConfig(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("schemapool: %w", err)
	}
	p := &Pool{
		admin:   admin,
		opts:    opts,
		drops:   make(chan struct{}, opts.Workers),
		changed: make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Take returns a schema nobody else was given, migrated to this binary's
// latest version. The caller owns it and gives it back with Release.
func (p *Pool) Take(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", errors.New("schemapool: pool closed")
	}
	p.taken++
	for {
		if len(p.ready) > 0 {
			s := p.ready[0]
			p.ready = p.ready[1:]
			p.fill()
			return s, nil
		}
		if p.err != nil {
			return "", p.err
		}
		p.waiting++
		p.fill()
		changed := p.changed
		p.mu.Unlock()
		var done error
		select {
		case <-changed:
		case <-ctx.Done():
			done = ctx.Err()
		}
		p.mu.Lock()
		p.waiting--
		if done != nil {
			return "", fmt.Errorf("schemapool: waiting for a schema: %w", done)
		}
		if p.closed {
			return "", errors.New("schemapool: pool closed")
		}
	}
}

// fill starts migrations until the schemas ready or under way cover the
// callers waiting plus the lead demand has earned, Workers at most at once.
// p.mu is held.
func (p *Pool) fill() {
	if p.closed || p.err != nil {
		return
	}
	want := p.waiting + min(p.taken, p.opts.Ahead)
	for p.migrating < p.opts.Workers && len(p.ready)+p.migrating < want {
		p.migrating++
		name := p.name()
		p.migWG.Add(1)
		go p.migrate(name)
	}
}

func (p *Pool) name() string {
	if p.opts.Name != nil {
		return p.opts.Name()
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return fmt.Sprintf("%s%d_%s", p.opts.Prefix, p.counter.Add(1), hex.EncodeToString(rnd[:]))
}

// migrate migrates schema and puts it in the ready list.
func (p *Pool) migrate(schema string) {
	defer p.migWG.Done()
	err := p.up(schema)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.migrating--
	switch {
	case p.closed:
		// Close drops whatever it finds, this one included.
		p.ready = append(p.ready, schema)
	case err != nil:
		if p.err == nil {
			p.err = fmt.Errorf("schemapool: migrate %s: %w", schema, err)
		}
		p.release(schema) // Up is one transaction, but be sure nothing is left
	default:
		p.ready = append(p.ready, schema)
		p.fill()
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool) up(schema string) error {
	m, err := pgmsgmigrate.New(p.admin, &pgmsgmigrate.Opts{Schema: schema})
	if err != nil {
		return err
	}
	return retry(p.ctx, func() error {
		_, err := m.Up(p.ctx)
		return err
	})
}

// retry runs fn until it succeeds, fails for good, or has failed for want
// of server resources five times. A shared test server runs out of them
// now and then: a migration holds a lock on each object it creates (some
// 240), a drop one on each object it drops, and the lock table is shared
// by every session (max_locks_per_transaction times max_connections).
func retry(ctx context.Context, fn func() error) error {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt == 5 || !transient(err) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
		wait *= 2
	}
}

// transient reports whether err is the server's lack of resources (class
// 53: out of shared memory, too many connections), a serialization failure
// or deadlock (class 40), or a server still starting (57P03).
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "53") || strings.HasPrefix(pgErr.Code, "40") || pgErr.Code == "57P03"
}

// Release drops schema, with the roles its migrations created, in the
// background; Close waits for it. Release a schema only once, and only
// when nothing uses it any more.
func (p *Pool) Release(schema string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release(schema)
}

// release starts dropping schema. p.mu is held.
func (p *Pool) release(schema string) {
	p.dropWG.Add(1)
	go func() {
		defer p.dropWG.Done()
		p.drops <- struct{}{}
		defer func() { <-p.drops }()
		if err := Drop(context.Background(), p.admin, schema); err != nil {
			p.mu.Lock()
			p.dropErrs = append(p.dropErrs, err)
			p.mu.Unlock()
		}
	}()
}

// Drop drops schema and the roles its migrations created, now, through
// pool, retrying when the server lacks resources. It waits at most a
// minute.
func Drop(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	if err == nil {
		err = retry(ctx, func() error { return m.Drop(ctx) })
	}
	if err != nil {
		return fmt.Errorf("schemapool: drop %s: %w", schema, err)
	}
	return nil
}

// Close stops migrating, drops the schemas nobody took, waits for every
// drop Release started, and closes the pool's connections. It returns the
// drops' errors: a schema it names is left on the server.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.changed) // wake any Take, which now fails
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.cancel()
	p.migWG.Wait()
	p.mu.Lock()
	for _, s := range p.ready {
		p.release(s)
	}
	p.ready = nil
	p.mu.Unlock()
	p.dropWG.Wait()
	p.admin.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.dropErrs...)
}
