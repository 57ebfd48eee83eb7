// Package dbsqlc holds pgmsg's runtime queries (queries/*.sql, with sqlc
// annotations) and the Go code sqlc generates from them. Every query calls
// one of the SQL functions of docs/sql-api.md in schema "pgmsg"; the library
// rewrites that schema to the configured one (internal/store's Store.DB
// and Store.SQL, with internal/schemaname's Qualify).
package dbsqlc

//go:generate go run ../migration/render -schema pgmsg -out schema.sql
//go:generate sqlc generate
