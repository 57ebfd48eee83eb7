package store

import (
	"strings"

	"github.com/pgmsg/pgmsg/internal/migration"
	"github.com/pgmsg/pgmsg/internal/schemaname"
)

// stmt is the statement file name of internal/migration/statements with
// its holes filled with args, written for the default schema as every
// statement of this package is (Store.SQL qualifies it for the store's).
// The SQL API's functions splice the same files into their bodies, so a
// rule a direct statement shares with a function is written once there.
func stmt(name string, args ...string) string {
	return strings.ReplaceAll(migration.Statement(name, args...), "{{schema}}", schemaname.Default)
}
