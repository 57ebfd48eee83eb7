package httpapi

import (
	"net/http"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func (s *Server) groupRoutes() []Route {
	return []Route{
		{Method: http.MethodGet, Pattern: "/v1/groups", Scope: pgmsg.ScopeAdmin, handler: s.listGroups},
		{Method: http.MethodGet, Pattern: "/v1/topics/{topic}/groups", Scope: pgmsg.ScopeAdmin, handler: s.listGroups},
		{Method: http.MethodGet, Pattern: "/v1/topics/{topic}/groups/{group}", Scope: pgmsg.ScopeAdmin, handler: s.describeGroup},
		{Method: http.MethodPost, Pattern: "/v1/topics/{topic}/groups/{group}/reset", Scope: pgmsg.ScopeAdmin, handler: s.resetGroup},
		{Method: http.MethodDelete, Pattern: "/v1/topics/{topic}/groups/{group}", Scope: pgmsg.ScopeAdmin, handler: s.deleteGroup},
		{Method: http.MethodGet, Pattern: "/v1/topics/{topic}/groups/{group}/dlq", Scope: pgmsg.ScopeAdmin, handler: s.listDeadLetters},
		{Method: http.MethodPost, Pattern: "/v1/topics/{topic}/groups/{group}/dlq/replay", Scope: pgmsg.ScopeAdmin, handler: s.replayDeadLetters},
	}
}

// deadLetterParams reads the path and the query parameters of the dead
// letter endpoints: limit (at most the server's MaxRecords) and
// dead_letter_topic.
func (s *Server) deadLetterParams(r *http.Request) (topic, group string, opts *pgmsg.DeadLettersOpts, err error) {
	topic, group = r.PathValue("topic"), r.PathValue("group")
	if err := validNames("topic", topic, "group", group); err != nil {
		return "", "", nil, err
	}
	q := params{r.URL.Query()}
	opts = &pgmsg.DeadLettersOpts{DeadLetterTopic: q.Get("dead_letter_topic")}
	if opts.DeadLetterTopic != "" {
		if err := validNames("topic", opts.DeadLetterTopic); err != nil {
			return "", "", nil, err
		}
	}
	if opts.Limit, err = q.int("limit", min(DeadLettersLimitDefault, s.cfg.MaxRecords)); err != nil {
		return "", "", nil, err
	}
	if opts.Limit < 1 {
		return "", "", nil, newAPIError(errInvalidParameter, "limit must be at least 1, got %d", opts.Limit)
	}
	if opts.Limit > s.cfg.MaxRecords {
		return "", "", nil, newAPIError(errLimitExceeded, "limit %d is more than the server's limit of %d", opts.Limit, s.cfg.MaxRecords)
	}
	return topic, group, opts, nil
}

// DeadLettersLimitDefault is how many dead letters GET .../dlq lists by
// default.
const DeadLettersLimitDefault = 100

// listDeadLetters lists the records a group set aside, oldest first per
// partition of the dead-letter topic. The answer stops before the dead
// letter that would take its keys and values past the server's answer
// limit (at least one is listed) and says so with "truncated".
func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) error {
	topic, group, opts, err := s.deadLetterParams(r)
	if err != nil {
		return err
	}
	enc, err := outputEncoding(r.URL.Query())
	if err != nil {
		return err
	}
	dl, err := s.client.DeadLetters(r.Context(), topic, group, opts)
	if err != nil {
		return err
	}
	out := []wire.DeadLetterJSON{}
	var size int64
	truncated := false
	for _, d := range dl {
		size += int64(len(d.Record.Key) + len(d.Record.Value))
		if len(out) > 0 && size > s.cfg.MaxAnswerBytes {
			truncated = true
			break
		}
		out = append(out, wire.EncodeDeadLetter(d, enc))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"dead_letters": out, "truncated": truncated})
}

// replayDeadLetters publishes a group's dead letters back to the topic,
// once each, for that group only.
func (s *Server) replayDeadLetters(w http.ResponseWriter, r *http.Request) error {
	topic, group, opts, err := s.deadLetterParams(r)
	if err != nil {
		return err
	}
	n, err := s.client.ReplayDeadLetters(r.Context(), topic, group, opts)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"topic": topic, "group": group, "replayed": n})
}

// listGroups lists groups filtered by the path's topic or the topic and
// group query parameters. GET /v1/groups answers one row per group, its
// partitions summed (pgmsg.GroupSummary, as `pgmsg group list`): its size
// grows with the groups, not their partitions (10,000 groups of 4
// partitions were 40,000 rows). ?partitions=true answers each partition's
// cursor (pgmsg.GroupPartition), as GET /v1/topics/{topic}/groups does
// unless given ?partitions=false.
func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) error {
	topic := r.PathValue("topic")
	perPartition := topic != ""
	if topic == "" {
		topic = r.URL.Query().Get("topic")
	}
	if r.URL.Query().Has("partitions") {
		p, err := params{r.URL.Query()}.bool("partitions")
		if err != nil {
			return err
		}
		perPartition = p
	}
	if g := r.URL.Query().Get("group"); g != "" {
		if err := validNames("group", g); err != nil {
			return err
		}
	}
	if topic != "" {
		if err := validNames("topic", topic); err != nil {
			return err
		}
		if _, err := s.partitions(r.Context(), topic); err != nil {
			return err
		}
	}
	if !perPartition {
		gs, err := s.client.ListGroupSummaries(r.Context(), topic, r.URL.Query().Get("group"))
		if err != nil {
			return err
		}
		if gs == nil {
			gs = []pgmsg.GroupSummary{}
		}
		return writeJSON(w, http.StatusOK, map[string]any{"groups": gs})
	}
	gs, err := s.client.ListGroups(r.Context(), topic, r.URL.Query().Get("group"))
	if err != nil {
		return err
	}
	if gs == nil {
		gs = []pgmsg.GroupPartition{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"groups": gs})
}

// describeGroup returns a group's members, cursors, owners and lag.
func (s *Server) describeGroup(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("topic", r.PathValue("topic"), "group", r.PathValue("group")); err != nil {
		return err
	}
	d, err := s.client.DescribeGroup(r.Context(), r.PathValue("topic"), r.PathValue("group"))
	if err != nil {
		return err
	}
	if d.Members == nil {
		d.Members = []pgmsg.GroupMember{}
	}
	return writeJSON(w, http.StatusOK, d)
}

// ResetGroupRequest is the body of POST .../groups/{group}/reset.
type ResetGroupRequest struct {
	// To is earliest, latest, an offset or an RFC 3339 timestamp.
	To string `json:"to"`
	// Partition resets only this partition. Default: all.
	Partition *int32 `json:"partition,omitempty"`
}

func (s *Server) resetGroup(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("topic", r.PathValue("topic"), "group", r.PathValue("group")); err != nil {
		return err
	}
	var req ResetGroupRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.To == "" {
		return newAPIError(errInvalidParameter, "field \"to\" is required: earliest, latest, an offset or a timestamp")
	}
	gs, err := s.client.ResetGroup(r.Context(), r.PathValue("topic"), r.PathValue("group"), req.To, req.Partition)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"partitions": gs})
}

func (s *Server) deleteGroup(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("topic", r.PathValue("topic"), "group", r.PathValue("group")); err != nil {
		return err
	}
	ok, err := s.client.DeleteGroup(r.Context(), r.PathValue("topic"), r.PathValue("group"))
	if err != nil {
		return err
	}
	if !ok {
		return newAPIError(pgmsg.ErrUnknownGroup, "unknown group %q on topic %q", r.PathValue("group"), r.PathValue("topic"))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
