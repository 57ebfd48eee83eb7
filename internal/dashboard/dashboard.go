// Package dashboard is the web dashboard of `pgmsg serve`, mounted at
// /ui/: static pages (HTML, CSS, JavaScript modules and the vendored uPlot
// chart library, all embedded, so it works air-gapped) that read and act
// through the HTTP API.
//
// The API itself never accepts cookies, so bearer-token clients and the
// API's CSRF exposure are unchanged. Instead the login form opens a
// session of the dashboard's own (session.go): the HttpOnly,
// SameSite=Strict cookie scoped to /ui/ holds a random session id, the
// token stays in the server's memory, and logout ends the session. The
// pages call /ui/api/v1/..., which this package forwards to the API
// in-process with the session's token as the bearer token: the API checks
// the scopes, as for any client. Every state-changing request made with the
// cookie must carry the session's CSRF token (a MAC of the session id
// under a per-process key), and an Origin, if sent, of this host.
//
// A few reads and actions the API has no route for (record browsing by
// offset or time, maintenance events, queue latency, log figures, tokens,
// job cancel) are served under /ui/api/ through the public pgmsg API, with
// the same scope rules: reads need the read or admin scope, actions admin.
package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/httpapi"
)

// Prefix is where the dashboard is mounted.
const Prefix = "/ui/"

const (
	// sessionCookie holds the session id of the logged-in user.
	sessionCookie = "pgmsg_session"
	// csrfHeader carries the session's CSRF token on state-changing requests.
	csrfHeader = "X-CSRF-Token"
	// loginMaxBytes caps the login form's body.
	loginMaxBytes = 4 << 10
)

//go:embed static
var staticFS embed.FS

// Config configures a Handler.
type Config struct {
	// API answers the forwarded /ui/api/v1 requests and authenticates the
	// session's token. Required.
	API *httpapi.Server
	// Client reads what the API has no route for. Required.
	Client *pgmsg.Client
	// Logger for failures. Default slog.Default().
	Logger *slog.Logger
}

// Handler serves the dashboard under Prefix.
type Handler struct {
	api     *httpapi.Server
	client  *pgmsg.Client
	logger  *slog.Logger
	csrfKey []byte
	mux     *http.ServeMux
	// sessions are the logins of this process.
	sessions *sessionStore
}

// New returns a Handler; mount it with httpapi.Server.Mount(Prefix, h).
func New(cfg Config) (*Handler, error) {
	if cfg.API == nil || cfg.Client == nil {
		return nil, fmt.Errorf("dashboard: Config.API and Config.Client are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("dashboard: CSRF key: %w", err)
	}
	h := &Handler{api: cfg.API, client: cfg.Client, logger: cfg.Logger, csrfKey: key, mux: http.NewServeMux(),
		sessions: newSessionStore()}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	files := http.StripPrefix(Prefix+"static/", http.FileServer(http.FS(static)))
	h.mux.Handle("GET "+Prefix+"static/", files)
	h.mux.HandleFunc("GET "+Prefix+"{$}", h.shell(h.page(static, "index.html")))
	h.mux.HandleFunc("GET "+Prefix+"login", h.page(static, "login.html"))
	h.mux.HandleFunc("POST "+Prefix+"login", h.login)
	h.mux.HandleFunc("POST "+Prefix+"logout", h.logout)
	h.mux.HandleFunc(Prefix+"api/v1/", h.forward)
	h.routes()
	h.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no dashboard page "+r.URL.Path)
	})
	return h, nil
}

// ServeHTTP serves the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The pages load nothing from elsewhere and are never framed.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer Chromium sends
	// "Origin: null" with the login form, which sameOrigin must refuse.
	w.Header().Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// page serves one embedded HTML page, never cached so that a new binary's
// pages are picked up at once.
func (h *Handler) page(static fs.FS, name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := fs.ReadFile(static, name)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "page missing from the binary")
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(body)
	}
}

// shell serves the pages' shell to a session, and sends anyone else to
// the login form (rather than letting the page find out by a 401).
func (h *Handler) shell(page http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.api.RequiresAuth() {
			secret := h.sessions.secret(sessionID(r))
			if secret == "" {
				http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
				return
			}
			if _, err := h.api.Authenticate(bearer(r, secret)); err != nil {
				http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
				return
			}
		}
		page(w, r)
	}
}

// session is a request's identity: its session id, the token the session
// was opened with and that token's secret (id and secret "" under
// InsecureNoAuth).
type session struct {
	id     string
	token  *pgmsg.Token
	secret string
}

// sessionID is the session id of the request's cookie, or "".
func sessionID(r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil {
		return c.Value
	}
	return ""
}

// authenticate finds the request's session and checks its token as the
// API checks a bearer token (httpapi.Server.Authenticate: same cache, same
// failure limit), so a revoked or expired token ends its sessions. It
// writes the error and returns nil on failure.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) *session {
	id, secret := "", ""
	if h.api.RequiresAuth() {
		id = sessionID(r)
		if secret = h.sessions.secret(id); secret == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pgmsg"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "no session, or it has ended: log in at "+Prefix+"login")
			return nil
		}
	}
	tok, err := h.api.Authenticate(bearer(r, secret))
	if err != nil {
		h.api.WriteError(w, r, err)
		return nil
	}
	return &session{id: id, token: tok, secret: secret}
}

// bearer returns a copy of r that carries secret as its bearer token and
// no cookies, as the API expects a client's request.
func bearer(r *http.Request, secret string) *http.Request {
	r2 := r.Clone(r.Context())
	r2.Header.Del("Cookie")
	r2.Header.Del("Authorization")
	if secret != "" {
		r2.Header.Set("Authorization", "Bearer "+secret)
	}
	return r2
}

// csrfToken is the session's CSRF token: a MAC of its id, so it differs
// per session, and a new process (a new key) invalidates the old ones.
func (h *Handler) csrfToken(sessionID string) string {
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write([]byte("csrf\x00" + sessionID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkChange refuses a state-changing request that a page of another
// site could have made: without the session's CSRF token, or with an
// Origin that is not this host. It writes 403 and returns false.
func (h *Handler) checkChange(w http.ResponseWriter, r *http.Request, s *session) bool {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "csrf_failed", "cross-origin request refused")
		return false
	}
	got := r.Header.Get(csrfHeader)
	if got == "" || !hmac.Equal([]byte(got), []byte(h.csrfToken(s.id))) {
		writeError(w, http.StatusForbidden, "csrf_failed", "missing or stale "+csrfHeader+" header: reload the page")
		return false
	}
	return true
}

// sameOrigin reports whether the request's Origin, if any, names its Host.
func sameOrigin(r *http.Request) bool {
	for _, o := range r.Header.Values("Origin") {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return false
		}
	}
	return true
}

// changes reports whether a method changes state.
func changes(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// forward sends /ui/api/v1/... to the API as /v1/... with the session's
// token; the API checks scopes and answers. Only the admin API is
// forwarded: the pages never publish, consume or claim, and consume and
// claim are GETs that change state, which no cookie should be able to do.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request) {
	if p := strings.TrimPrefix(r.URL.Path, Prefix+"api/v1/"); strings.HasPrefix(p, "pubsub/") || strings.HasPrefix(p, "queue/") {
		writeError(w, http.StatusNotFound, "not_found", "the dashboard forwards the admin API only: call /v1/"+p+" with a bearer token")
		return
	}
	s := h.authenticate(w, r)
	if s == nil {
		return
	}
	if changes(r.Method) && !h.checkChange(w, r, s) {
		return
	}
	r2 := bearer(r, s.secret)
	r2.URL.Path = "/" + strings.TrimPrefix(r.URL.Path, Prefix+"api/")
	// What the API answers a session is no one else's: no cache keeps it.
	w.Header().Set("Cache-Control", "no-store")
	r2.URL.RawPath = ""
	r2.RequestURI = ""
	h.api.ServeHTTP(w, r2)
}

// login checks the form's token as the API would and opens a session for
// it: the cookie gets the session's id, a new one at each login.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "csrf_failed", "cross-origin login refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, loginMaxBytes)
	if err := r.ParseForm(); err != nil {
		loginFailed(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	if secret == "" {
		loginFailed(w, http.StatusBadRequest, "Enter a token.")
		return
	}
	tok, err := h.api.Authenticate(bearer(r, secret))
	if err != nil {
		loginFailed(w, http.StatusUnauthorized, "That token is unknown, revoked or expired, or there were too many attempts.")
		return
	}
	if !tok.CanRead() {
		loginFailed(w, http.StatusForbidden, "That token has neither the read nor the admin scope, so there is nothing the dashboard could show.")
		return
	}
	// A session the browser had is replaced, not left behind.
	if old := sessionID(r); old != "" {
		h.sessions.close(old)
	}
	id, err := h.sessions.open(secret)
	if err != nil {
		loginFailed(w, http.StatusInternalServerError, "The session could not be opened.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: Prefix,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// loginFailed answers the login form again with a message.
func loginFailed(w http.ResponseWriter, status int, msg string) {
	body, _ := fs.ReadFile(staticFS, "static/login.html")
	page := strings.Replace(string(body), `<p id="login-error" role="alert" hidden></p>`,
		`<p id="login-error" role="alert">`+msg+`</p>`, 1)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(page))
}

// logout ends the session and clears its cookie (a CSRF-checked request,
// so that another site cannot log the user out). The cookie is worth
// nothing afterwards; the token itself stays valid (revoke it to end it).
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	id := sessionID(r)
	if !h.checkChange(w, r, &session{id: id}) {
		return
	}
	h.sessions.close(id)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}
