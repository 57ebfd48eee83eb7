package httpapi

import (
	"net/http"

	"github.com/pgmsg/pgmsg"
)

func (s *Server) groupRoutes() []Route {
	return []Route{
		{Method: http.MethodGet, Pattern: "/v1/groups", Scope: pgmsg.ScopeAdmin, handler: s.listGroups},
		{Method: http.MethodGet, Pattern: "/v1/topics/{topic}/groups", Scope: pgmsg.ScopeAdmin, handler: s.listGroups},
		{Method: http.MethodGet, Pattern: "/v1/topics/{topic}/groups/{group}", Scope: pgmsg.ScopeAdmin, handler: s.describeGroup},
		{Method: http.MethodPost, Pattern: "/v1/topics/{topic}/groups/{group}/reset", Scope: pgmsg.ScopeAdmin, handler: s.resetGroup},
		{Method: http.MethodDelete, Pattern: "/v1/topics/{topic}/groups/{group}", Scope: pgmsg.ScopeAdmin, handler: s.deleteGroup},
	}
}

// listGroups lists group cursors with lag per partition, filtered by the
// path's topic or the topic and group query parameters.
func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) error {
	topic := r.PathValue("topic")
	if topic == "" {
		topic = r.URL.Query().Get("topic")
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
