package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/httpapi"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// Limits of the dashboard's own reads.
const (
	recordsLimitDefault = 50
	recordsLimitMax     = 500
	eventsLimit         = 20
	// sequencePending is how many of a sequence's waiting jobs the job
	// page lists; limitKeysRead how many limit keys the queue page reads
	// (by key) to rank by running jobs, limitKeysTop how many it shows.
	sequencePending = 20
	limitKeysRead   = 1000
	limitKeysTop    = 10
	bodyMaxBytes    = 64 << 10
)

// routes registers the dashboard's own endpoints: what the pages need and
// the API has no route for.
func (h *Handler) routes() {
	h.mux.HandleFunc("GET "+Prefix+"api/session", h.read(h.sessionInfo))
	h.mux.HandleFunc("GET "+Prefix+"api/log", h.read(h.logFigures))
	h.mux.HandleFunc("GET "+Prefix+"api/events", h.read(h.events))
	h.mux.HandleFunc("GET "+Prefix+"api/latency", h.read(h.latency))
	h.mux.HandleFunc("GET "+Prefix+"api/records", h.read(h.records))
	h.mux.HandleFunc("GET "+Prefix+"api/tokens", h.admin(h.listTokens))
	h.mux.HandleFunc("POST "+Prefix+"api/tokens", h.admin(h.createToken))
	h.mux.HandleFunc("POST "+Prefix+"api/tokens/{id}/revoke", h.admin(h.revokeToken))
	h.mux.HandleFunc("POST "+Prefix+"api/jobs/{id}/cancel", h.admin(h.cancelJob))
	h.mux.HandleFunc("GET "+Prefix+"api/sequence", h.read(h.sequence))
	h.mux.HandleFunc("GET "+Prefix+"api/queue-limits", h.read(h.queueLimits))
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, s *session) error

// read serves f to a session whose token has the read or admin scope.
func (h *Handler) read(f handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := h.authenticate(w, r)
		if s == nil {
			return
		}
		if !s.token.CanRead() {
			writeError(w, http.StatusForbidden, "forbidden", "token lacks the read or admin scope")
			return
		}
		if err := f(w, r, s); err != nil {
			h.api.WriteError(w, r, err)
		}
	}
}

// admin serves f, an action, to a session whose token has the admin
// scope and whose request passes the CSRF check.
func (h *Handler) admin(f handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := h.authenticate(w, r)
		if s == nil {
			return
		}
		if !s.token.Allows(pgmsg.ScopeAdmin, "") {
			writeError(w, http.StatusForbidden, "forbidden", "token "+strconv.Quote(s.token.Name)+" lacks the admin scope")
			return
		}
		if changes(r.Method) && !h.checkChange(w, r, s) {
			return
		}
		if err := f(w, r, s); err != nil {
			h.api.WriteError(w, r, err)
		}
	}
}

// sessionInfo tells the pages who is logged in, whether to show actions,
// and the CSRF token to send with them.
func (h *Handler) sessionInfo(w http.ResponseWriter, _ *http.Request, s *session) error {
	return writeJSON(w, map[string]any{
		"name":   s.token.Name,
		"scopes": s.token.Scopes,
		"admin":  s.token.Allows(pgmsg.ScopeAdmin, ""),
		"csrf":   h.csrfToken(s.id),
		// Under InsecureNoAuth there is no login, so nothing to log out of.
		"logout": s.secret != "",
	})
}

// topicFigures sums one topic's partitions and groups.
type topicFigures struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	// EndOffset is the sum of the partitions' next offsets: records
	// published so far, whose change over time is the publish rate.
	EndOffset int64 `json:"end_offset"`
	Records   int64 `json:"records"`
	Segments  int   `json:"segments"`
	Groups    int   `json:"groups"`
	Lag       int64 `json:"lag"`
}

type groupFigures struct {
	Topic      string `json:"topic"`
	Group      string `json:"group"`
	Partitions int    `json:"partitions"`
	Lag        int64  `json:"lag"`
}

// logFigures answers every topic's and group's totals from LogTotals,
// two aggregate queries over pgmsg's own tables (no record scan, no file
// sizes: LogMetrics takes seconds for 1,000 topics), whose answer grows
// with the topics and groups, not their partitions. With ?topic=T it
// answers that topic's groups only ("topics" is empty): what the topic
// page shows, read through the cursor table's primary key, so that its
// cost does not grow with the number of topics.
func (h *Handler) logFigures(w http.ResponseWriter, r *http.Request, _ *session) error {
	outT := []*topicFigures{}
	var outG []*groupFigures
	if topic := r.URL.Query().Get("topic"); topic != "" {
		if err := pgmsg.ValidateName("topic", topic); err != nil {
			return err
		}
		groups, err := h.client.ListGroups(r.Context(), topic, "")
		if err != nil {
			return err
		}
		gs := map[string]*groupFigures{}
		for _, g := range groups {
			gf := gs[g.Group]
			if gf == nil {
				gf = &groupFigures{Topic: g.Topic, Group: g.Group}
				gs[g.Group] = gf
				outG = append(outG, gf)
			}
			gf.Partitions++
			gf.Lag += g.Lag
		}
	} else {
		topics, groups, err := h.client.LogTotals(r.Context())
		if err != nil {
			return err
		}
		byName := make(map[string]*topicFigures, len(topics))
		for _, t := range topics {
			tf := &topicFigures{Name: t.Topic, Partitions: int(t.Partitions), EndOffset: t.EndOffset,
				Records: t.EndOffset - t.StartOffset, Segments: t.Segments}
			byName[t.Topic] = tf
			outT = append(outT, tf)
		}
		for _, g := range groups {
			outG = append(outG, &groupFigures{Topic: g.Topic, Group: g.Group, Partitions: int(g.Partitions), Lag: g.Lag})
			if tf := byName[g.Topic]; tf != nil {
				tf.Groups++
				tf.Lag += g.Lag
			}
		}
	}
	sort.Slice(outT, func(i, j int) bool { return outT[i].Name < outT[j].Name })
	if outG == nil {
		outG = []*groupFigures{}
	}
	sort.Slice(outG, func(i, j int) bool {
		if outG[i].Topic != outG[j].Topic {
			return outG[i].Topic < outG[j].Topic
		}
		return outG[i].Group < outG[j].Group
	})
	return writeJSON(w, map[string]any{"at": time.Now().UTC(), "topics": outT, "groups": outG})
}

// events answers the most recent maintenance events.
func (h *Handler) events(w http.ResponseWriter, r *http.Request, _ *session) error {
	ev, err := h.client.MaintenanceEvents(r.Context(), "", eventsLimit)
	if err != nil {
		return err
	}
	if ev == nil {
		ev = []pgmsg.MaintenanceEvent{}
	}
	return writeJSON(w, map[string]any{"events": ev})
}

type latencyJSON struct {
	Queue     string  `json:"queue"`
	Completed int64   `json:"completed"`
	Cancelled int64   `json:"cancelled"`
	P50       float64 `json:"latency_p50_seconds"`
	P99       float64 `json:"latency_p99_seconds"`
	RunP50    float64 `json:"run_p50_seconds"`
	RunP99    float64 `json:"run_p99_seconds"`
}

// latency answers every queue's latency quantiles over the last minute.
func (h *Handler) latency(w http.ResponseWriter, r *http.Request, _ *session) error {
	ms, err := h.client.QueueLatency(r.Context(), time.Minute)
	if err != nil {
		return err
	}
	out := make([]latencyJSON, 0, len(ms))
	for _, m := range ms {
		out = append(out, latencyJSON{Queue: m.Queue, Completed: m.Completed, Cancelled: m.Cancelled,
			P50: m.LatencyP50.Seconds(), P99: m.LatencyP99.Seconds(), RunP50: m.RunP50.Seconds(), RunP99: m.RunP99.Seconds()})
	}
	return writeJSON(w, map[string]any{"window_seconds": 60, "queues": out})
}

// records answers up to limit records of one partition from an offset, or
// from the first record at or after a time (the time index).
func (h *Handler) records(w http.ResponseWriter, r *http.Request, _ *session) error {
	q := r.URL.Query()
	topic := q.Get("topic")
	if err := pgmsg.ValidateName("topic", topic); err != nil {
		return err
	}
	partition, err := intParam(q.Get("partition"), "partition", 0, 0, 1<<31-1)
	if err != nil {
		return err
	}
	limit, err := intParam(q.Get("limit"), "limit", recordsLimitDefault, 1, recordsLimitMax)
	if err != nil {
		return err
	}
	offset, err := intParam(q.Get("offset"), "offset", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	if v := q.Get("time"); v != "" {
		if q.Get("offset") != "" {
			return invalid("give offset or time, not both")
		}
		at, err := wire.ParseTime("time", v)
		if err != nil {
			return invalid(err.Error())
		}
		if offset, err = h.client.OffsetForTime(r.Context(), topic, int32(partition), at); err != nil {
			return err
		}
	}
	recs, err := h.client.Fetch(r.Context(), topic, int32(partition), offset, int(limit))
	if err != nil {
		return err
	}
	// Values go out as text (base64 if not UTF-8), never as parsed JSON:
	// the page shows the stored bytes as they are (18.50 stays 18.50), and
	// pretty-prints JSON only when asked to.
	out := make([]wire.RecordJSON, 0, len(recs))
	for _, rec := range recs {
		out = append(out, wire.EncodeRecord(rec, wire.EncodingText))
	}
	return writeJSON(w, map[string]any{"topic": topic, "partition": partition, "from": offset, "records": out})
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request, _ *session) error {
	toks, err := h.client.ListTokens(r.Context())
	if err != nil {
		return err
	}
	if toks == nil {
		toks = []*pgmsg.Token{}
	}
	return writeJSON(w, map[string]any{"tokens": toks})
}

// createTokenRequest is the body of POST /ui/api/tokens.
type createTokenRequest struct {
	Name      string     `json:"name"`
	Scopes    []string   `json:"scopes"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// createToken answers the new token's secret, which is shown once.
func (h *Handler) createToken(w http.ResponseWriter, r *http.Request, _ *session) error {
	var req createTokenRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	var opts *pgmsg.CreateTokenOpts
	if req.ExpiresAt != nil {
		opts = &pgmsg.CreateTokenOpts{ExpiresAt: *req.ExpiresAt}
	}
	secret, tok, err := h.client.CreateToken(r.Context(), req.Name, req.Scopes, opts)
	if err != nil {
		return err
	}
	return writeJSON(w, map[string]any{"secret": secret, "token": tok})
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request, _ *session) error {
	id, err := intParam(r.PathValue("id"), "id", 0, 1, 1<<62)
	if err != nil {
		return err
	}
	if err := h.client.RevokeToken(r.Context(), id); err != nil {
		return err
	}
	// Refused by this server at once; other servers trust their cache
	// for up to their token cache TTL.
	h.api.ForgetToken(id)
	return writeJSON(w, map[string]any{"id": id, "revoked": true})
}

// cancelJob cancels a job that has not finished (Client.CancelJob).
func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request, _ *session) error {
	id, err := intParam(r.PathValue("id"), "id", 0, 1, 1<<62)
	if err != nil {
		return err
	}
	ok, err := h.client.CancelJob(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, map[string]any{"id": id, "cancelled": ok})
}

// sequence answers the progress of one sequence of a queue
// (?queue=&key=): the job that runs or runs next, the first waiting ones
// in order, the job holding it, and its last archived job.
func (h *Handler) sequence(w http.ResponseWriter, r *http.Request, _ *session) error {
	q := r.URL.Query()
	if err := pgmsg.ValidateName("queue", q.Get("queue")); err != nil {
		return err
	}
	s, err := h.client.GetSequence(r.Context(), q.Get("queue"), q.Get("key"), &pgmsg.GetSequenceOpts{Limit: sequencePending})
	if err != nil {
		return err
	}
	return writeJSON(w, s)
}

// queueLimits answers a queue's concurrency settings (max_running, the
// per-key limit and its key field), its limit keys with the most running
// jobs (the top limitKeysTop of the first limitKeysRead keys, by key; the
// answer says when there were more), and how many sequences have live
// jobs or are held (of the first limitKeysRead).
func (h *Handler) queueLimits(w http.ResponseWriter, r *http.Request, _ *session) error {
	name := r.URL.Query().Get("queue")
	if err := pgmsg.ValidateName("queue", name); err != nil {
		return err
	}
	queues, err := h.client.ListQueues(r.Context())
	if err != nil {
		return err
	}
	var cfg *pgmsg.Queue
	for _, q := range queues {
		if q.Name == name {
			cfg = q
		}
	}
	if cfg == nil {
		return fmt.Errorf("%w: unknown queue %q", pgmsg.ErrUnknownQueue, name)
	}
	keys := []*pgmsg.LimitKey{}
	if cfg.KeyLimit > 0 {
		if keys, err = h.client.ListLimitKeys(r.Context(), name, &pgmsg.ListLimitKeysOpts{Limit: limitKeysRead}); err != nil {
			return err
		}
	}
	seqs, err := h.client.ListSequences(r.Context(), name, &pgmsg.ListSequencesOpts{Limit: limitKeysRead})
	if err != nil {
		return err
	}
	held := 0
	for _, s := range seqs {
		if s.HeldJobID != 0 {
			held++
		}
	}
	top := append([]*pgmsg.LimitKey(nil), keys...)
	sort.SliceStable(top, func(i, j int) bool { return top[i].Running > top[j].Running })
	if len(top) > limitKeysTop {
		top = top[:limitKeysTop]
	}
	if top == nil {
		top = []*pgmsg.LimitKey{}
	}
	return writeJSON(w, map[string]any{
		"queue": name, "max_running": cfg.MaxRunning, "rate_limit": cfg.RateLimit,
		"key_limit": cfg.KeyLimit, "key_field": cfg.KeyField,
		"limit_keys": len(keys), "limit_keys_more": len(keys) == limitKeysRead, "top_keys": top,
		"sequences": len(seqs), "sequences_more": len(seqs) == limitKeysRead, "sequences_held": held,
	})
}

// invalid is a client's mistake in a parameter: 400 invalid_argument.
func invalid(msg string) error {
	return fmt.Errorf("%w: %s", pgmsg.ErrInvalidArgument, msg)
}

// intParam parses an optional integer parameter within [lo, hi].
func intParam(v, name string, def, lo, hi int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, invalid(name + " must be an integer from " + strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10) + ", got " + strconv.Quote(v))
	}
	return n, nil
}

// decodeBody reads one JSON object, refusing unknown fields.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, bodyMaxBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return invalid("body larger than 64 KiB")
		}
		return invalid("body is not the expected JSON object: " + err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("body has data after the JSON object")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, v any) error {
	// As the API's bodies: text as written, not HTML-escaped.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
	return nil
}

// writeError writes the API's error body with the dashboard's own codes.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: code, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
