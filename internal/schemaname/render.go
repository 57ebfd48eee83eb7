package schemaname

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// SQL text is built from the schema name here and nowhere else, in one of
// two notations:
//
//   - templates (the migrations, the function files, the migrator's own
//     statements) write {{schema}} for the quoted identifier and
//     {{schema_lit}} for the quoted string literal: Render;
//   - queries (the sqlc queries and the store's direct statements, which
//     must parse as plain SQL) qualify every object "pgmsg.", the default
//     schema, and no other text in them contains that string: Qualify.

// Render substitutes the schema into templated SQL: {{schema}} becomes the
// quoted identifier and {{schema_lit}} the quoted string literal.
func Render(sql, schema string) string {
	return strings.NewReplacer(
		"{{schema}}", pgx.Identifier{schema}.Sanitize(),
		"{{schema_lit}}", QuoteLiteral(schema),
	).Replace(sql)
}

// Qualify turns a query written for the default schema ("pgmsg."
// qualifiers) into one for schema.
func Qualify(query, schema string) string {
	if schema == Default {
		return query
	}
	return strings.ReplaceAll(query, Default+".", pgx.Identifier{schema}.Sanitize()+".")
}

// QuoteLiteral quotes s as a standard-conforming SQL string literal.
func QuoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
