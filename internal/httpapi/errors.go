package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmsg/pgmsg"
)

// Errors of the HTTP layer itself (the library's sentinels cover the rest).
var (
	errMalformedJSON    = errors.New("malformed JSON")
	errInvalidParameter = errors.New("invalid parameter")
	errBodyTooLarge     = errors.New("body too large")
	errTooManyRecords   = errors.New("too many records")
	errLimitExceeded    = errors.New("limit exceeded")
	errUnauthorized     = errors.New("unauthorized")
	errInvalidToken     = errors.New("invalid token")
	errAuthRateLimited  = errors.New("too many failed authentications")
	errForbidden        = errors.New("forbidden")
	errHostNotAllowed   = errors.New("host not allowed")
	errOriginNotAllowed = errors.New("origin not allowed")
	errCrossSite        = errors.New("cross-site request")
	errNotFound         = errors.New("not found")
	errMethodNotAllowed = errors.New("method not allowed")
	errUnsupportedMedia = errors.New("unsupported media type")
	errUnavailable      = errors.New("unavailable")
	errShuttingDown     = errors.New("shutting down")
)

// errorStatus maps the HTTP layer's own errors to an HTTP status and a
// stable code; the library's sentinels carry theirs (pgmsg.Sentinel), so
// a new sentinel cannot be missing here. The first entry the error
// matches with errors.Is wins, then the sentinel it carries, then the
// availability entries; anything unmatched is a 500 "internal".
// docs/http-api.md lists every code.
type statusEntry struct {
	err    error
	status int
	code   string
}

var errorStatus = []statusEntry{
	// Request shape and limits.
	{errMalformedJSON, http.StatusBadRequest, "malformed_json"},
	{errInvalidParameter, http.StatusBadRequest, "invalid_parameter"},
	{errLimitExceeded, http.StatusBadRequest, "limit_exceeded"},
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, "body_too_large"},
	{errTooManyRecords, http.StatusRequestEntityTooLarge, "too_many_records"},
	{errUnsupportedMedia, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	// Auth.
	{errUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{errInvalidToken, http.StatusUnauthorized, "invalid_token"},
	{errForbidden, http.StatusForbidden, "forbidden"},
	// InsecureNoAuth only: the Host (DNS rebinding) or Origin (a web page)
	// of the request is not loopback.
	{errHostNotAllowed, http.StatusForbidden, "host_not_allowed"},
	{errOriginNotAllowed, http.StatusForbidden, "origin_not_allowed"},
	// A browser says a page of another site or origin made a
	// state-changing request (Sec-Fetch-Site); in every mode.
	{errCrossSite, http.StatusForbidden, "cross_site_request"},
	// The client's address failed to authenticate too often
	// (Config.AuthFailureBurst); answered without a database round trip.
	{errAuthRateLimited, http.StatusTooManyRequests, "auth_rate_limited"},
	// Routing.
	{errNotFound, http.StatusNotFound, "not_found"},
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed"},
}

// availability is matched after the library's sentinels.
var availability = []statusEntry{
	{errShuttingDown, http.StatusServiceUnavailable, "shutting_down"},
	{errUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "unavailable"},
	{context.Canceled, http.StatusServiceUnavailable, "unavailable"},
}

// apiError is an HTTP-layer error with its message.
type apiError struct {
	kind error
	msg  string
	// retryAfter, if positive, is the Retry-After (seconds) of a 429.
	retryAfter int
}

func (e *apiError) Error() string { return e.msg }
func (e *apiError) Unwrap() error { return e.kind }

func newAPIError(kind error, format string, args ...any) error {
	return &apiError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a stable code and a message for people.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// errorFor returns the status, code and message of err.
func errorFor(err error) (int, string, string) {
	msg := err.Error()
	var pe *pgmsg.Error
	if errors.As(err, &pe) {
		msg = pe.Message
	}
	for _, e := range errorStatus {
		if errors.Is(err, e.err) {
			return e.status, e.code, msg
		}
	}
	if status, code := sentinelStatus(err); status != 0 {
		return status, code, msg
	}
	for _, e := range availability {
		if errors.Is(err, e.err) {
			if e.err != errShuttingDown && e.err != errUnavailable {
				msg = "the request was canceled or timed out"
			}
			return e.status, e.code, msg
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgmsg.IsInputError(err) {
		// A data exception (such as a NUL byte in a text value) or a
		// program limit (an index row too large) is the request's fault;
		// validation should have caught it first.
		status, code := sentinelStatus(pgmsg.ErrInvalidArgument)
		return status, code, "invalid argument: " + pgErr.Message
	}
	if pgmsg.IsRetryable(err) {
		return http.StatusServiceUnavailable, "unavailable", "the database is unavailable; retry later"
	}
	return http.StatusInternalServerError, "internal", "internal error"
}

// sentinelStatus returns the status and code of the library sentinel err
// carries, or 0.
func sentinelStatus(err error) (int, string) {
	var s *pgmsg.Sentinel
	if errors.As(err, &s) {
		return s.HTTPStatus(), s.Name()
	}
	return 0, ""
}

// writeError writes err as the stable error body, logging unexpected ones.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := errorFor(err)
	switch {
	case r.Context().Err() != nil:
		// The client went away (or gave up on a long poll): nothing to log.
	case status == http.StatusServiceUnavailable:
		s.logger.Warn("pgmsg: http request unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
	case status >= 500:
		s.logger.Error("pgmsg: http request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pgmsg"`)
	}
	if status == http.StatusTooManyRequests {
		retry := 1
		var ae *apiError
		if errors.As(err, &ae) && ae.retryAfter > 0 {
			retry = ae.retryAfter
		}
		w.Header().Set("Retry-After", strconv.Itoa(retry))
	}
	if err := writeJSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: msg}}); err != nil {
		// Strings always encode; kept so that nothing is ever dropped silently.
		s.logger.Error("pgmsg: http error body failed to encode", "error", err)
		writeBody(w, http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`+"\n"))
	}
}
