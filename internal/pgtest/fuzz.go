package pgtest

import (
	"os"
	"strings"
)

// Hostile are strings built to break naive SQL building, parsing and
// encoding: quotes, comment and statement separators, format() and
// identifier metacharacters, unicode, and very long values. Fuzz targets
// take them as their first inputs; TestHostileSQLArguments throws them
// at every parameter of every SQL function.
var Hostile = []string{
	"", " ", "a", "'", "''", `"`, `""`, `\`, `\'`, ";", "';", `"; DROP TABLE x; --`,
	"'); DROP SCHEMA public CASCADE; --", "$$", "$x$", "%s", "%I", "%L", "%%", "%1$s",
	"--", "/*", "*/", "\n", "\r\n", "\t", "\x7f", "é", "日本語", "🦫", "\u202e", "\ufeff", "a\u0301",
	"earliest", "latest", "-1", "0", "9223372036854775807", "9223372036854775808", "1e309", "NaN",
	"2026-11-29T10:00:00Z", "infinity", "-infinity", "epoch", "allballs", "294277-01-01", "4714-11-24 BC",
	"pgmsg.topic", "pg_catalog.pg_sleep", "${schema}", "{{schema}}", "{{schema_lit}}",
	strings.Repeat("a", 200), strings.Repeat("a", 201), strings.Repeat("'", 5000), strings.Repeat("日", 70000),
}

// IgnoreKnown (PGMSG_FUZZ_IGNORE_KNOWN=1) makes fuzz targets skip inputs
// of bugs already reported, so that a fuzzing session can look for new
// ones. By default they fail: they are the regression tests of those bugs.
var IgnoreKnown = os.Getenv("PGMSG_FUZZ_IGNORE_KNOWN") != ""
