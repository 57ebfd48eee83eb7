package pgmsg_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pgmsg/pgmsg"
)

// FuzzMatchPattern: token scope patterns ('*' matches any run) agree with
// a regular-expression reference, and Allows never grants a kind the
// token does not have.
func FuzzMatchPattern(f *testing.F) {
	for _, s := range [][2]string{{"orders.*", "orders.eu"}, {"*", ""}, {"a*b*c", "abbbc"}, {"**", "x"}, {"*.*", "."},
		{"a*", "b"}, {"'*", "';drop"}, {"日*", "日本"}, {"*a*a*a*b", strings.Repeat("a", 40)}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if len(pattern) > 64 || len(name) > 256 {
			return
		}
		if !utf8.ValidString(pattern) || !utf8.ValidString(name) {
			return // the regexp reference works on runes, pgmsg.MatchPattern on bytes
		}
		parts := strings.Split(pattern, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		want := regexp.MustCompile(`^(?s:` + strings.Join(parts, ".*") + `)$`).MatchString(name)
		if got := pgmsg.MatchPattern(pattern, name); got != want {
			t.Fatalf("MatchPattern(%q, %q) = %v, want %v", pattern, name, got, want)
		}
		tok := &pgmsg.Token{Scopes: []string{pgmsg.ScopePublish + ":" + pattern}}
		if tok.Allows(pgmsg.ScopeConsume, name) || tok.Allows(pgmsg.ScopeAdmin, name) {
			t.Fatalf("publish:%s allows consume or admin on %q", pattern, name)
		}
	})
}

// TestMatchPatternIsNotExponential: a scope pattern with a few '*' against
// a 200-byte name (the longest valid topic or queue name) must be matched
// in well under a millisecond. The recursive matcher takes 0.4s for three
// stars and 15s for four (found by this review): an authenticated client
// holding such a scope could pin the server's CPU with one request.
func TestMatchPatternIsNotExponential(t *testing.T) {
	name := strings.Repeat("a", 200)
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		_ = pgmsg.MatchPattern("*a*a*a*b", name)
		done <- time.Since(start)
	}()
	select {
	case d := <-done:
		if d > 50*time.Millisecond {
			t.Fatalf(`MatchPattern("*a*a*a*b", 200 x "a") took %s: matching must be linear (two pointers, backtrack to the last '*')`, d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(`MatchPattern("*a*a*a*b", 200 x "a") did not finish in 10s`)
	}
}
