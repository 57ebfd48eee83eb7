package pgmsgtype

import (
	"strings"
	"time"
)

// Token describes an API token of the HTTP server. The secret is only
// returned once, by pgmsg.Client.CreateToken.
type Token struct {
	ID     int64    `json:"id"`
	Name   string   `json:"name"`
	Prefix string   `json:"prefix"`
	Scopes []string `json:"scopes"`
	// CreatedAt, ExpiresAt (nil: never), RevokedAt (nil: live) and
	// LastUsedAt (nil: never; updated at most once a minute).
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// Scope kinds. A scope is ScopeAdmin or "KIND:PATTERN", where PATTERN is a
// topic or queue name in which '*' matches any run of characters. A consume
// scope can also name the consumer groups it may use:
// "consume:PATTERN/group:GROUP_PATTERN" (for example
// "consume:orders/group:billing"); without "/group:" it allows every group.
const (
	ScopeAdmin = "admin"
	// ScopeRead allows what ScopeAdmin allows on reads only (every GET of
	// the admin API: topics, groups, queues, jobs): the dashboard's
	// read-only viewers and monitoring scripts, which must not change
	// anything.
	ScopeRead    = "read"
	ScopePublish = "publish" // publish to matching topics
	ScopeConsume = "consume" // consume from, commit and extend claims on matching topics
	ScopeEnqueue = "enqueue" // enqueue into matching queues
	ScopeClaim   = "claim"   // claim, complete, fail and extend jobs of matching queues
)

// ScopeGroupSep separates a consume scope's topic pattern from its group
// pattern.
const ScopeGroupSep = "/group:"

// Allows reports whether the token's scopes permit kind (ScopePublish ...)
// on name, a topic or queue. An admin token allows everything; kind
// ScopeAdmin is only allowed to admin tokens.
//
// For ScopeConsume it only counts scopes that allow every group; use
// AllowsGroup where the group is known.
func (t *Token) Allows(kind, name string) bool {
	for _, s := range t.Scopes {
		if s == ScopeAdmin {
			return true
		}
		k, pattern, ok := strings.Cut(s, ":")
		if ok && k == kind && kind != ScopeAdmin && !strings.Contains(pattern, ScopeGroupSep) && MatchPattern(pattern, name) {
			return true
		}
	}
	return false
}

// CanRead reports whether the token may read what the admin API shows
// (ScopeAdmin or ScopeRead).
func (t *Token) CanRead() bool {
	for _, s := range t.Scopes {
		if s == ScopeAdmin || s == ScopeRead {
			return true
		}
	}
	return false
}

// AllowsGroup reports whether the token may consume topic as group: an
// admin scope, consume:PATTERN matching topic (every group), or
// consume:PATTERN/group:GROUP_PATTERN matching both.
func (t *Token) AllowsGroup(topic, group string) bool {
	for _, s := range t.Scopes {
		if s == ScopeAdmin {
			return true
		}
		k, pattern, ok := strings.Cut(s, ":")
		if !ok || k != ScopeConsume {
			continue
		}
		topics, groups, scoped := strings.Cut(pattern, ScopeGroupSep)
		if MatchPattern(topics, topic) && (!scoped || MatchPattern(groups, group)) {
			return true
		}
	}
	return false
}

// MatchPattern reports whether name matches pattern, in which '*' matches
// any run of characters (including none) and every other byte itself.
func MatchPattern(pattern, name string) bool {
	// Iterative glob match: on a mismatch, backtrack only to the last '*'
	// (linear in len(pattern)*len(name) at worst, never exponential).
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
