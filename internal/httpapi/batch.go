package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/pgmsg/pgmsg"
)

// batchRoutes are the routes of batches (jobs enqueued together, with
// callbacks).
func (s *Server) batchRoutes() []Route {
	return []Route{
		{Method: http.MethodPost, Pattern: "/v1/queues/{queue}/batches", Scope: pgmsg.ScopeEnqueue, handler: s.enqueueBatch},
		{Method: http.MethodGet, Pattern: "/v1/batches/{id}", Scope: pgmsg.ScopeAdmin, handler: s.getBatch},
	}
}

// BatchCallback is a batch's callback job in a BatchRequest.
type BatchCallback struct {
	Kind string `json:"kind"`
	// Args, any JSON value, is the job's payload (as JSON text).
	Args     json.RawMessage `json:"args,omitempty"`
	Queue    string          `json:"queue,omitempty"`
	Priority int             `json:"priority,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// BatchRequest is the body of POST /v1/queues/{queue}/batches: the jobs
// as POST /v1/queue/enqueue takes them, and the callbacks.
type BatchRequest struct {
	Encoding   string         `json:"encoding,omitempty"`
	Jobs       []EnqueueJob   `json:"jobs"`
	OnComplete *BatchCallback `json:"on_complete,omitempty"`
	OnDiscard  *BatchCallback `json:"on_discard,omitempty"`
	OnFinished *BatchCallback `json:"on_finished,omitempty"`
}

// libCallback is c as the library takes it (nil for none).
func libCallback(c *BatchCallback) *pgmsg.BatchCallback {
	if c == nil {
		return nil
	}
	cb := &pgmsg.BatchCallback{Kind: c.Kind, Queue: c.Queue, Priority: c.Priority}
	if c.Args != nil {
		cb.Args = c.Args
	}
	if c.Metadata != nil {
		cb.Metadata = c.Metadata
	}
	return cb
}

// enqueueBatch enqueues a batch of jobs with callbacks into {queue}, all
// or nothing, and answers the batch's id and the jobs' results.
func (s *Server) enqueueBatch(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := validNames("queue", queue); err != nil {
		return err
	}
	if err := authorize(r, pgmsg.ScopeEnqueue, queue); err != nil {
		return err
	}
	var req BatchRequest
	err := s.decodeList(w, r, &listBody{
		listField: "jobs", max: s.cfg.MaxRecords,
		item: func(dec *json.Decoder, _ int) error {
			req.Jobs = append(req.Jobs, EnqueueJob{})
			return dec.Decode(&req.Jobs[len(req.Jobs)-1])
		},
		fields: map[string]any{"encoding": &req.Encoding, "on_complete": &req.OnComplete,
			"on_discard": &req.OnDiscard, "on_finished": &req.OnFinished},
	})
	if err != nil {
		return err
	}
	params, err := enqueueParams(&EnqueueRequest{Queue: queue, Encoding: req.Encoding, Jobs: req.Jobs})
	if err != nil {
		return err
	}
	res, err := s.client.EnqueueBatch(r.Context(), queue, params, &pgmsg.BatchOpts{
		OnComplete: libCallback(req.OnComplete), OnDiscard: libCallback(req.OnDiscard), OnFinished: libCallback(req.OnFinished)})
	if err != nil {
		return err
	}
	s.metrics.enqueued.WithLabelValues(queue).Add(float64(len(res.Jobs)))
	return writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "batch_id": res.ID, "jobs": res.Jobs})
}

// getBatch answers batch {id}: its jobs' counts by state, its callbacks
// and, once finished, their job ids.
func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) error {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return newAPIError(errInvalidParameter, "batch id must be a positive integer, got %q", truncateParam(raw))
	}
	b, err := s.client.GetBatch(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}
