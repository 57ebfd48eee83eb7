package migration

import (
	"io/fs"
	"strings"
	"testing"
)

func TestSpliceFillsHolesAndNests(t *testing.T) {
	got := splice("x = {{sql claim_epoch(v, p_prev)}};", 0)
	want := "x = CASE WHEN v = p_prev THEN ((v) % 9007199254740991 + 1) ELSE v END;"
	if got != want {
		t.Fatalf("splice:\n got %s\nwant %s", got, want)
	}
	if got := Statement("token_next", "a + b"); got != "((a + b) % 9007199254740991 + 1)" {
		t.Fatalf("token_next: %s", got)
	}
	if got := splice("  {{sql timeline}}", 0); !strings.HasPrefix(got, "  ('x' || pg_catalog.substr(") {
		t.Fatalf("timeline: %s", got)
	}
}

func TestSpliceRefusesMalformedIncludes(t *testing.T) {
	for _, bad := range []string{"{{sql nosuchfile}}", "{{sql token_next(a}}", "{{sql token_next}}", "{{sql timeline"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q: no panic", bad)
				}
			}()
			splice(bad, 0)
		}()
	}
}

// Every statement file is in use: included by a function file (the SQL
// API runs it), and its text is what the functions hold after splicing.
func TestStatementFilesAreIncluded(t *testing.T) {
	entries, err := fs.ReadDir(statementFiles, "statements")
	if err != nil {
		t.Fatal(err)
	}
	var raw strings.Builder
	for _, name := range codeOrder {
		b, err := functionFiles.ReadFile("functions/" + name + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		raw.Write(b)
	}
	all := raw.String()
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		nested := false
		for _, o := range entries {
			b, _ := statementFiles.ReadFile("statements/" + o.Name())
			nested = nested || strings.Contains(string(b), "{{sql "+name)
		}
		if !strings.Contains(all, "{{sql "+name) && !nested {
			t.Errorf("statements/%s is included by no function file", e.Name())
		}
	}
	for _, c := range AllCode() {
		if strings.Contains(c.SQL, "{{sql ") {
			t.Errorf("functions/%s.sql: an include left after splicing", c.Name)
		}
	}
}
