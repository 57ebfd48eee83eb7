package migration

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// argNames returns the first word of each top-level comma-separated part of
// s (a signature's argument list), and where the list ends: the index of
// the parenthesis that closes it, or -1.
func argNames(s string) ([]string, int) {
	depth, start := 0, 0
	var names []string
	add := func(part string) {
		if f := strings.Fields(part); len(f) > 0 {
			names = append(names, strings.Trim(f[0], `"`))
		}
	}
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				add(s[start:i])
				return names, i
			}
			depth--
		case ',':
			if depth == 0 {
				add(s[start:i])
				start = i + 1
			}
		}
	}
	return nil, -1
}

// docs/sql-api.md is the reference the Python and Node clients are written
// against: every public function of the function files has a
// signature there with the argument names the SQL has (callers pass them by
// name), and every error code the functions raise is listed.
func TestSQLAPIDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../docs/sql-api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	fn := regexp.MustCompile(`CREATE OR REPLACE FUNCTION \{\{schema\}\}\."?([a-z0-9_]+)"?\(`)
	codes := regexp.MustCompile(`_raise\('(PM[0-9A-Z]+)'`)
	seen := 0
	for _, c := range AllCode() {
		for _, m := range fn.FindAllStringSubmatchIndex(c.SQL, -1) {
			name := c.SQL[m[2]:m[3]]
			if strings.HasPrefix(name, "_") {
				continue
			}
			seen++
			want, end := argNames(c.SQL[m[1]:])
			if end < 0 {
				t.Fatalf("%s: cannot read the signature of %s", c.Name, name)
			}
			// Every place the page writes `name(...)`: one must list the same arguments.
			var found [][]string
			for _, at := range regexp.MustCompile("`"+name+`\(`).FindAllStringIndex(doc, -1) {
				if got, end := argNames(doc[at[1]:]); end >= 0 {
					found = append(found, got)
				}
			}
			if !slices.ContainsFunc(found, func(got []string) bool { return slices.Equal(got, want) }) {
				t.Errorf("docs/sql-api.md: no signature of %s(%s); it has %v", name, strings.Join(want, ", "), found)
			}
		}
		for _, m := range codes.FindAllStringSubmatch(c.SQL, -1) {
			if !strings.Contains(doc, "| "+m[1]+" |") {
				t.Errorf("docs/sql-api.md: error code %s (raised in functions/%s.sql) is in no error table", m[1], c.Name)
			}
		}
	}
	if seen < 60 {
		t.Fatalf("read only %d public functions: the pattern no longer matches the function files", seen)
	}
}
