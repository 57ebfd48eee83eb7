package pgtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TxBundle is what Tx gives a test: an open transaction on a migrated
// schema that no other test uses meanwhile.
type TxBundle struct {
	// Tx is the test's transaction, rolled back when the test ends. Its
	// session's search_path is empty, as for Schema's pools.
	pgx.Tx
	// Schema is the migrated schema, for qualifying names.
	Schema string
}

// txSchema is a schema Tx lends, and the sequence values it was migrated
// with, which a rollback does not restore.
type txSchema struct {
	name string
	seqs []seqState
}

type seqState struct {
	name     string // qualified and quoted
	last     int64
	isCalled bool
}

var (
	txMu   sync.Mutex
	txFree []*txSchema // schemas rolled back to their migrated state
)

// Tx gives the test a transaction on a migrated schema of its own for the
// test's duration, rolled back when the test ends: for tests that only
// need SQL on one connection. Rolling back returns the schema to its
// migrated state, so the next Tx of the binary lends it again instead of
// migrating another (sequences, which a rollback leaves advanced, are set
// back to their migrated values). A schema is not lent again, but dropped,
// if the transaction did not end in a rollback by Tx (the test committed,
// or the connection broke).
//
// Everything the test does is inside the transaction: it cannot commit to
// see its work from another session, and other sessions cannot see it.
// LISTEN/NOTIFY, advisory locks and the like need Schema.
func Tx(tb testing.TB) *TxBundle {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgx.ParseConfig(URL(tb))
	if err != nil {
		tb.Fatalf("pgtest: parse URL: %v", err)
	}
	cfg.RuntimeParams["search_path"] = ""
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	s, drop := lend(tb, ctx, conn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		_ = conn.Close(ctx)
		_ = drop()
		tb.Fatalf("pgtest: begin: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		clean := false
		if st := conn.PgConn().TxStatus(); st == 'T' || st == 'E' {
			clean = tx.Rollback(ctx) == nil && restoreSequences(ctx, conn, s) == nil
		}
		_ = conn.Close(ctx)
		if clean && s.seqs != nil {
			txMu.Lock()
			txFree = append(txFree, s)
			txMu.Unlock()
			return
		}
		if err := drop(); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return &TxBundle{Tx: tx, Schema: s.name}
}

// lend returns a free Tx schema, or a fresh one with its sequence values
// recorded, and the function that drops it.
func lend(tb testing.TB, ctx context.Context, conn *pgx.Conn) (*txSchema, func() error) {
	tb.Helper()
	if sp := pool(tb); sp != nil {
		txMu.Lock()
		if n := len(txFree); n > 0 {
			s := txFree[n-1]
			txFree = txFree[:n-1]
			txMu.Unlock()
			return s, func() error { sp.Release(s.name); return nil }
		}
		txMu.Unlock()
	}
	name, drop := take(tb)
	s := &txSchema{name: name}
	seqs, err := readSequences(ctx, conn, name)
	if err != nil {
		_ = drop()
		tb.Fatalf("pgtest: %v", err)
	}
	if pool(tb) != nil {
		// Only schemas of the binary's pool are lent again: Main drops
		// them. (s.seqs stays nil otherwise, and the schema is dropped.)
		s.seqs = seqs
	}
	return s, drop
}

// readSequences returns the state of schema's sequences.
func readSequences(ctx context.Context, conn *pgx.Conn, schema string) ([]seqState, error) {
	rows, err := conn.Query(ctx, `SELECT format('%I.%I', schemaname, sequencename), coalesce(last_value, start_value), last_value IS NOT NULL
FROM pg_sequences WHERE schemaname = $1 ORDER BY sequencename`, schema)
	if err != nil {
		return nil, fmt.Errorf("read sequences of %s: %w", schema, err)
	}
	seqs := []seqState{} // non-nil: recorded
	var q seqState
	_, err = pgx.ForEachRow(rows, []any{&q.name, &q.last, &q.isCalled}, func() error {
		seqs = append(seqs, q)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read sequences of %s: %w", schema, err)
	}
	return seqs, nil
}

// restoreSequences sets s's sequences back to their recorded values.
func restoreSequences(ctx context.Context, conn *pgx.Conn, s *txSchema) error {
	if len(s.seqs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, q := range s.seqs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "setval(%s, %d, %t)", quoteLiteral(q.name), q.last, q.isCalled)
	}
	_, err := conn.Exec(ctx, b.String(), pgx.QueryExecModeSimpleProtocol)
	return err
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
