package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// Sessions: the cookie holds a session id of the dashboard's own, never
// the API token. The token it was opened with stays in this process's
// memory, and logout forgets it, so that a stolen or left-behind cookie
// is worth nothing after logout, and the token itself is never stored in
// the browser.
const (
	// sessionIdleTimeout ends a session not used for this long.
	sessionIdleTimeout = 12 * time.Hour
	// sessionsMax caps the sessions kept; beyond it the least recently
	// used is forgotten.
	sessionsMax = 10000
	// sessionIDPrefix starts every session id (tokens start "pgm_").
	sessionIDPrefix = "pgs_"
)

// sessionStore maps a session id's SHA-256 to the token secret it was
// opened with.
type sessionStore struct {
	mu sync.Mutex
	m  map[[32]byte]*sessionEntry
	// now is time.Now (tests may replace it before use).
	now func() time.Time
}

type sessionEntry struct {
	secret   string
	lastUsed time.Time
}

func newSessionStore() *sessionStore {
	return &sessionStore{m: map[[32]byte]*sessionEntry{}, now: time.Now}
}

// open starts a session for secret and returns its id.
func (s *sessionStore) open(secret string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := sessionIDPrefix + base64.RawURLEncoding.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= sessionsMax {
		s.evict(now)
	}
	s.m[sha256.Sum256([]byte(id))] = &sessionEntry{secret: secret, lastUsed: now}
	return id, nil
}

// evict forgets the idle sessions, and if none was, the least recently
// used one. Called with mu held.
func (s *sessionStore) evict(now time.Time) {
	var oldest [32]byte
	var oldestAt time.Time
	for k, e := range s.m {
		if now.Sub(e.lastUsed) > sessionIdleTimeout {
			delete(s.m, k)
			continue
		}
		if oldestAt.IsZero() || e.lastUsed.Before(oldestAt) {
			oldest, oldestAt = k, e.lastUsed
		}
	}
	if len(s.m) >= sessionsMax {
		delete(s.m, oldest)
	}
}

// secret returns the token secret of a live session ("" if id is none).
func (s *sessionStore) secret(id string) string {
	if id == "" {
		return ""
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[k]
	if !ok {
		return ""
	}
	now := s.now()
	if now.Sub(e.lastUsed) > sessionIdleTimeout {
		delete(s.m, k)
		return ""
	}
	e.lastUsed = now
	return e.secret
}

// close ends a session.
func (s *sessionStore) close(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sha256.Sum256([]byte(id)))
}
