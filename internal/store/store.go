// Package store is pgmsg's storage layer, the one package that speaks to
// PostgreSQL on the library's behalf (River's driver is the model). It
// owns the sqlc-generated queries (internal/dbsqlc), the direct
// statements written by hand for the hot paths, the schema templating of
// both (schemaname.Qualify), the conversion between pgtype's nullable
// types and plain Go values, and the mapping of database errors onto
// pgmsg's sentinels (errs.Map). The root package calls its methods with
// Go values and gets Go values and mapped errors back; it imports neither
// pgtype, pgconn nor dbsqlc.
//
// Conventions of every method:
//   - it takes the connection to run on (exec: a pool, a connection or a
//     transaction) after the context, so callers choose the transaction;
//   - optional values are pointers (nil is SQL NULL) or the zero value
//     where the SQL API treats zero as "none", as its doc says;
//   - it returns errors through errs.Map: an error the SQL API raised
//     with a code is an *errs.Error of its sentinel; pgx.ErrNoRows is
//     returned as is where "no row" is an answer the caller interprets.
package store

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/schemaname"
)

// DBTX is what every method runs on: a pool, a connection or a pgx.Tx.
type DBTX = dbsqlc.DBTX

// Store runs pgmsg's statements in one schema. It is safe for concurrent
// use and holds no connection of its own.
type Store struct {
	schema string
	q      *dbsqlc.Queries
	sql    sync.Map // query text for the default schema -> for schema
	copy   copyTexts
	// kafkaCopy: the Kafka listener's idempotent COPY statements.
	kafkaCopy kafkaCopyTexts
	// copyDenied: a COPY publish was refused for lack of privilege (only
	// the schema's owner may write the record table); the
	// connections' role publishes through _publish_direct() from then on.
	copyDenied atomic.Bool
}

// New returns a Store for schema (already validated).
func New(schema string) *Store {
	return &Store{schema: schema, q: dbsqlc.New()}
}

// SQL returns query, written for the default schema, for the store's
// schema. Results are cached: queries are a fixed set of strings.
func (s *Store) SQL(query string) string {
	if s.schema == schemaname.Default {
		return query
	}
	if v, ok := s.sql.Load(query); ok {
		return v.(string)
	}
	out := schemaname.Qualify(query, s.schema)
	s.sql.Store(query, out)
	return out
}

// DB wraps exec so that statements written for the default schema run in
// the store's schema.
func (s *Store) DB(exec DBTX) DBTX {
	if s.schema == schemaname.Default {
		return exec
	}
	return qualifyingDB{exec: exec, s: s}
}

type qualifyingDB struct {
	exec DBTX
	s    *Store
}

func (d qualifyingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.exec.Exec(ctx, d.s.SQL(sql), args...)
}

func (d qualifyingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return d.exec.Query(ctx, d.s.SQL(sql), args...)
}

func (d qualifyingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.exec.QueryRow(ctx, d.s.SQL(sql), args...)
}
