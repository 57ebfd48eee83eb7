package httpapi

import (
	"net/http"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func (s *Server) topicRoutes() []Route {
	return []Route{
		{Method: http.MethodGet, Pattern: "/v1/topics", Scope: pgmsg.ScopeAdmin, handler: s.listTopics},
		{Method: http.MethodPost, Pattern: "/v1/topics", Scope: pgmsg.ScopeAdmin, handler: s.createTopic},
		{Method: http.MethodGet, Pattern: "/v1/topics/{topic}", Scope: pgmsg.ScopeAdmin, handler: s.describeTopic},
		{Method: http.MethodPatch, Pattern: "/v1/topics/{topic}", Scope: pgmsg.ScopeAdmin, handler: s.configureTopic},
		{Method: http.MethodDelete, Pattern: "/v1/topics/{topic}", Scope: pgmsg.ScopeAdmin, handler: s.deleteTopic},
		{Method: http.MethodGet, Pattern: "/v1/topics/{topic}/offsets", Scope: pgmsg.ScopeAdmin, handler: s.offsetsForTime},
	}
}

// CreateTopicRequest is the body of POST /v1/topics.
type CreateTopicRequest struct {
	Name string `json:"name"`
	pgmsg.TopicConfig
}

// ConfigureTopicRequest is the body of PATCH /v1/topics/{topic}: each key of
// Settings is set to its value, a null removes it (Client.SetTopicSettings).
type ConfigureTopicRequest struct {
	Settings map[string]any `json:"settings"`
}

func (s *Server) listTopics(w http.ResponseWriter, r *http.Request) error {
	topics, err := s.client.ListTopics(r.Context())
	if err != nil {
		return err
	}
	if topics == nil {
		topics = []*pgmsg.Topic{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"topics": topics})
}

func (s *Server) createTopic(w http.ResponseWriter, r *http.Request) error {
	var req CreateTopicRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	t, err := s.client.CreateTopic(r.Context(), req.Name, req.TopicConfig)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, t)
}

func (s *Server) describeTopic(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("topic", r.PathValue("topic")); err != nil {
		return err
	}
	d, err := s.client.DescribeTopic(r.Context(), r.PathValue("topic"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, d)
}

func (s *Server) configureTopic(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("topic", r.PathValue("topic")); err != nil {
		return err
	}
	var req ConfigureTopicRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if len(req.Settings) == 0 {
		return newAPIError(errInvalidParameter, `give "settings": an object of settings to change (null removes one)`)
	}
	t, err := s.client.SetTopicSettings(r.Context(), r.PathValue("topic"), req.Settings)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

func (s *Server) deleteTopic(w http.ResponseWriter, r *http.Request) error {
	if err := validNames("topic", r.PathValue("topic")); err != nil {
		return err
	}
	// ?force=true drops records and groups too; without it a topic that
	// has any is 409 topic_not_empty, as `pgmsg topic delete` asks --force.
	force, err := params{r.URL.Query()}.bool("force")
	if err != nil {
		return err
	}
	del := s.client.DeleteEmptyTopic
	if force {
		del = s.client.DeleteTopic
	}
	if err := del(r.Context(), r.PathValue("topic")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// offsetsForTime answers each partition's first offset at or after the
// time given (?time=RFC 3339), through the time index.
func (s *Server) offsetsForTime(w http.ResponseWriter, r *http.Request) error {
	topic := r.PathValue("topic")
	if err := validNames("topic", topic); err != nil {
		return err
	}
	q := params{r.URL.Query()}
	v, err := q.required("time")
	if err != nil {
		return err
	}
	at, err := wire.ParseTime("time", v)
	if err != nil {
		return newAPIError(errInvalidParameter, "%v", err)
	}
	offsets, err := s.client.OffsetsForTime(r.Context(), topic, at)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"topic": topic, "time": at.UTC(), "offsets": offsets})
}
