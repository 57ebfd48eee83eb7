package migration

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
)

// Statement files (statements/*.sql) hold the hot paths' rules once: a
// statement or an expression that both the Go client's direct statements
// (internal/store) and the SQL API's functions (functions/*.sql) run.
// A function file includes one with {{sql name}} or {{sql name(a, b)}}:
// the file's text, its leading comment lines left out, with {{1}}, {{2}}
// … replaced by the arguments. The splice happens before the function
// files are checksummed and rendered, so a change to a statement file is
// a change to every function that includes it. A statement file may
// include another. Its own $1, $2 … are left as they are: in a statement
// the Go client prepares they are its parameters, and in a function body
// they name the function's parameters, so a statement file whose $n are
// a function's arguments in the function's order is spliced into it
// as is. Statement files name pgmsg's objects {{schema}}-qualified and
// pg_catalog's functions pg_catalog-qualified (the Go client runs them
// under the connection's search_path).

//go:embed statements/*.sql
var statementFiles embed.FS

// Statement returns statement file name (without directory and
// extension), its includes spliced and its holes filled with args, still
// templated ({{schema}}). It panics on an unknown name or a malformed
// include: the texts are fixed at build time and tests read them all.
func Statement(name string, args ...string) string {
	return statement(name, args, 0)
}

var holeRE = regexp.MustCompile(`\{\{(\d+)\}\}`)

func statement(name string, args []string, depth int) string {
	if depth > 8 {
		panic("migration: statement includes nest too deep at " + name)
	}
	body, err := statementFiles.ReadFile("statements/" + name + ".sql")
	if err != nil {
		panic("migration: no statement file " + name + ": " + err.Error())
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], "--") {
		lines = lines[1:]
	}
	text := strings.TrimSpace(strings.Join(lines, "\n"))
	text = holeRE.ReplaceAllStringFunc(text, func(h string) string {
		var i int
		_, _ = fmt.Sscanf(h, "{{%d}}", &i)
		if i < 1 || i > len(args) {
			panic(fmt.Sprintf("migration: statement %s uses {{%d}} but gets %d arguments", name, i, len(args)))
		}
		return args[i-1]
	})
	return splice(text, depth+1)
}

// splice replaces every {{sql name(args)}} of text with the statement.
func splice(text string, depth int) string {
	const open = "{{sql "
	var b strings.Builder
	for {
		i := strings.Index(text, open)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i])
		rest := text[i+len(open):]
		j := 0
		for j < len(rest) && (rest[j] == '_' || rest[j] >= 'a' && rest[j] <= 'z' || rest[j] >= '0' && rest[j] <= '9') {
			j++
		}
		name := rest[:j]
		rest = rest[j:]
		var args []string
		if strings.HasPrefix(rest, "(") {
			depthP, start, k := 0, 1, 0
		scan:
			for k = 0; k < len(rest); k++ {
				switch rest[k] {
				case '(':
					depthP++
				case ')':
					depthP--
					if depthP == 0 {
						args = append(args, strings.TrimSpace(rest[start:k]))
						break scan
					}
				case ',':
					if depthP == 1 {
						args = append(args, strings.TrimSpace(rest[start:k]))
						start = k + 1
					}
				}
			}
			if k == len(rest) {
				panic("migration: unclosed {{sql " + name + "(")
			}
			rest = rest[k+1:]
		}
		if name == "" || !strings.HasPrefix(rest, "}}") {
			panic("migration: malformed {{sql " + name + " include")
		}
		// Lines after the first take the include's indentation, so that the
		// rendered functions read as written.
		indent := ""
		if nl := strings.LastIndexByte(text[:i], '\n'); strings.TrimSpace(text[nl+1:i]) == "" {
			indent = text[nl+1 : i]
		}
		b.WriteString(strings.ReplaceAll(statement(name, args, depth), "\n", "\n"+indent))
		text = rest[2:]
	}
}
