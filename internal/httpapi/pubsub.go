package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func (s *Server) pubsubRoutes() []Route {
	return []Route{
		{Method: http.MethodPost, Pattern: "/v1/pubsub/publish", Scope: pgmsg.ScopePublish, handler: s.publish},
		{Method: http.MethodGet, Pattern: "/v1/pubsub/consume", Scope: pgmsg.ScopeConsume, changesOnGet: true, handler: s.consume},
		{Method: http.MethodPost, Pattern: "/v1/pubsub/commit", Scope: pgmsg.ScopeConsume, handler: s.commit},
		{Method: http.MethodPost, Pattern: "/v1/pubsub/extend", Scope: pgmsg.ScopeConsume, handler: s.extend},
		{Method: http.MethodPost, Pattern: "/v1/pubsub/release", Scope: pgmsg.ScopeConsume, handler: s.release},
		{Method: http.MethodPost, Pattern: "/v1/pubsub/heartbeat", Scope: pgmsg.ScopeConsume, handler: s.heartbeat},
		{Method: http.MethodPost, Pattern: "/v1/pubsub/leave", Scope: pgmsg.ScopeConsume, handler: s.leave},
		// The original paths (kept for clients written against them).
		{Method: http.MethodPost, Pattern: "/pubsub/publish", Alias: "/v1/pubsub/publish", Scope: pgmsg.ScopePublish, handler: s.publish},
		{Method: http.MethodGet, Pattern: "/pubsub/consume", Alias: "/v1/pubsub/consume", Scope: pgmsg.ScopeConsume, changesOnGet: true, handler: s.consume},
	}
}

// PublishRequest is the body of POST /v1/pubsub/publish.
type PublishRequest struct {
	Topic string `json:"topic"`
	// Encoding of every record's value: json (default), text or base64.
	Encoding string `json:"encoding,omitempty"`
	// KeyEncoding of keys and header values: text (default) or base64.
	KeyEncoding string          `json:"key_encoding,omitempty"`
	Records     []PublishRecord `json:"records"`
	// ProducerID and Sequence, given together, make the publish
	// idempotent: the records are numbered from Sequence, and the same
	// body sent again stores nothing and answers with the same positions
	// (duplicate true). See Client.PublishIdempotent.
	ProducerID *string `json:"producer_id,omitempty"`
	Sequence   *int64  `json:"sequence,omitempty"`
}

// PublishRecord is one record to publish.
type PublishRecord struct {
	Key     *string           `json:"key,omitempty"`
	Value   json.RawMessage   `json:"value,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Partition publishes to this partition instead of choosing by key. If
	// one record has it, every record of the request must.
	Partition *int32     `json:"partition,omitempty"`
	Timestamp *time.Time `json:"timestamp,omitempty"`
}

// PublishResponse lists where each record landed, in request order.
type PublishResponse struct {
	Topic   string            `json:"topic"`
	Records []PublishedRecord `json:"records"`
	// Duplicate is true when an idempotent publish had been stored
	// before: nothing was written, the records are where they were.
	Duplicate bool `json:"duplicate,omitempty"`
}

// PublishedRecord is one published record's position.
type PublishedRecord struct {
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"`
}

// publish appends records to a topic atomically: all or none.
func (s *Server) publish(w http.ResponseWriter, r *http.Request) error {
	var req PublishRequest
	err := s.decodeList(w, r, &listBody{
		nameField: "topic", name: &req.Topic,
		authorize: func(topic string) error { return authorize(r, pgmsg.ScopePublish, topic) },
		listField: "records", max: s.cfg.MaxRecords,
		item: func(dec *json.Decoder, _ int) error {
			req.Records = append(req.Records, PublishRecord{})
			return dec.Decode(&req.Records[len(req.Records)-1])
		},
		fields: map[string]any{"encoding": &req.Encoding, "key_encoding": &req.KeyEncoding,
			"producer_id": &req.ProducerID, "sequence": &req.Sequence},
	})
	if err != nil {
		return err
	}
	if req.Topic == "" {
		return newAPIError(errInvalidParameter, "field \"topic\" is required")
	}
	// Again: the topic may have come after the records.
	if err := authorize(r, pgmsg.ScopePublish, req.Topic); err != nil {
		return err
	}
	if (req.ProducerID == nil) != (req.Sequence == nil) {
		return newAPIError(errInvalidParameter, "fields \"producer_id\" and \"sequence\" go together: give both for an idempotent publish, or neither")
	}
	// An empty batch is the library's to refuse (ErrEmptyBatch); one over
	// MaxRecords was refused while it was read.
	recs := make([]*pgmsg.Record, len(req.Records))
	manual := len(req.Records) > 0 && req.Records[0].Partition != nil
	for i, in := range req.Records {
		req.Records[i] = PublishRecord{} // the decoded copy is garbage once converted
		if (in.Partition != nil) != manual {
			return newAPIError(errInvalidParameter, "records[%d]: either every record names a partition or none does", i)
		}
		rec := &pgmsg.Record{Topic: req.Topic}
		var err error
		if rec.Value, err = decodeValue(in.Value, req.Encoding, fmt.Sprintf("records[%d].value", i)); err != nil {
			return err
		}
		if in.Key != nil {
			if rec.Key, err = decodeText(*in.Key, req.KeyEncoding, fmt.Sprintf("records[%d].key", i)); err != nil {
				return err
			}
		}
		if len(in.Headers) > 0 {
			rec.Headers = make(map[string][]byte, len(in.Headers))
			for k, v := range in.Headers {
				if rec.Headers[k], err = decodeText(v, req.KeyEncoding, fmt.Sprintf("records[%d].headers[%q]", i, k)); err != nil {
					return err
				}
			}
		}
		if in.Partition != nil {
			rec.Partition = *in.Partition
		}
		if in.Timestamp != nil {
			if in.Timestamp.IsZero() {
				// The library reads the zero time as "no timestamp" and
				// would store the publish time instead of what was asked.
				return newAPIError(pgmsg.ErrInvalidArgument, "records[%d].timestamp %s cannot be stored (it means \"no timestamp\"): "+
					"send 0001-01-01T00:00:00.000001Z or later, or no timestamp for the publish time", i, in.Timestamp.Format(time.RFC3339Nano))
			}
			// In UTC, as records are read: encoding/json parses offsets it
			// cannot write back (+24:00), and the answer must encode.
			rec.Timestamp = in.Timestamp.UTC()
		}
		recs[i] = rec
	}
	opts := &pgmsg.PublishOpts{ManualPartition: manual}
	duplicate := false
	if req.ProducerID != nil {
		var err error
		if duplicate, err = s.client.PublishIdempotent(r.Context(), *req.ProducerID, *req.Sequence, recs, opts); err != nil {
			return err
		}
	} else if err := s.client.Publish(r.Context(), recs, opts); err != nil {
		return err
	}
	if !duplicate {
		s.metrics.published.WithLabelValues(req.Topic).Add(float64(len(recs)))
	}
	resp := PublishResponse{Topic: req.Topic, Records: make([]PublishedRecord, len(recs)), Duplicate: duplicate}
	for i, rec := range recs {
		resp.Records[i] = PublishedRecord{Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp.UTC()}
	}
	return writeJSON(w, http.StatusOK, resp)
}

// ClaimJSON identifies a claim: present it to commit, extend or release.
type ClaimJSON struct {
	Topic     string    `json:"topic"`
	Group     string    `json:"group"`
	Partition int32     `json:"partition"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
	// StartOffset and NextOffset bound the claimed records [start, next).
	StartOffset int64 `json:"start_offset"`
	NextOffset  int64 `json:"next_offset"`
	// Committed is true when the request asked for auto_commit.
	Committed bool `json:"committed"`
}

// ConsumeResponse is the answer of GET /v1/pubsub/consume. Claim is null
// and Records empty when nothing arrived within the wait.
type ConsumeResponse struct {
	Claim   *ClaimJSON        `json:"claim"`
	Records []wire.RecordJSON `json:"records"`
}

// consume claims the group's next records of the topic, long-polling up to
// wait for some to arrive.
func (s *Server) consume(w http.ResponseWriter, r *http.Request) error {
	q := params{r.URL.Query()}
	topic, err := q.required("topic")
	if err != nil {
		return err
	}
	group, err := q.required("group")
	if err != nil {
		return err
	}
	if err := authorizeGroup(r, topic, group); err != nil {
		return err
	}
	opts := pgmsg.ClaimOpts{Start: q.Get("start"), Member: q.Get("member")}
	if opts.Member != "" {
		// A member is named as in its heartbeat: a valid name.
		if err := validNames("member", opts.Member); err != nil {
			return err
		}
	}
	if opts.RequireOwner, err = q.bool("assigned"); err != nil {
		return err
	}
	if opts.RequireOwner && opts.Member == "" {
		return newAPIError(errInvalidParameter, "assigned=true needs the member whose partitions to claim")
	}
	if opts.MaxRecords, err = q.int("max_records", min(ConsumeMaxRecordsDefault, s.cfg.MaxRecords)); err != nil {
		return err
	}
	if opts.MaxRecords < 1 {
		return newAPIError(errInvalidParameter, "max_records must be at least 1, got %d", opts.MaxRecords)
	}
	if opts.MaxRecords > s.cfg.MaxRecords {
		return newAPIError(errLimitExceeded, "max_records %d is more than the server's limit of %d", opts.MaxRecords, s.cfg.MaxRecords)
	}
	if opts.MaxBytes, err = q.maxBytes(s.cfg.MaxAnswerBytes); err != nil {
		return err
	}
	if opts.Lease, err = q.duration("lease", 0); err != nil {
		return err
	}
	if opts.Partition, err = q.optInt32("partition"); err != nil {
		return err
	}
	wait, err := q.duration("wait", 0)
	if err != nil {
		return err
	}
	if wait > s.cfg.MaxWait {
		return newAPIError(errLimitExceeded, "wait %s is longer than the server's limit of %s", wait, s.cfg.MaxWait)
	}
	autoCommit, err := q.bool("auto_commit")
	if err != nil {
		return err
	}
	enc, err := outputEncoding(q.Values)
	if err != nil {
		return err
	}

	cl, err := s.claimWaiting(r.Context(), topic, group, &opts, wait)
	if err != nil {
		return err
	}
	resp := ConsumeResponse{Records: []wire.RecordJSON{}}
	if cl != nil {
		resp.Claim = &ClaimJSON{Topic: topic, Group: group, Partition: cl.Partition, Epoch: cl.Epoch, ExpiresAt: cl.ExpiresAt.UTC(),
			StartOffset: cl.Records[0].Offset, NextOffset: cl.NextOffset(), Committed: autoCommit}
		for _, rec := range cl.Records {
			resp.Records = append(resp.Records, wire.EncodeRecord(rec, enc))
		}
	}
	// The answer is encoded before the commit: records that cannot be
	// encoded must not be committed (they would be lost to the group). The
	// claim is released instead, and the request fails with a 500.
	body, err := encodeJSON(resp)
	if err != nil {
		if cl != nil {
			if rerr := s.client.Release(context.WithoutCancel(r.Context()), cl); rerr != nil {
				s.logger.Warn("pgmsg: http consume: release after a failed encoding", "topic", topic, "group", group, "error", rerr)
			}
		}
		return err
	}
	if cl != nil {
		if autoCommit {
			if err := s.client.Commit(context.WithoutCancel(r.Context()), cl); err != nil {
				return err
			}
		}
		s.metrics.consumed.WithLabelValues(topic, group).Add(float64(len(cl.Records)))
	}
	writeBody(w, http.StatusOK, body)
	return nil
}

// claimWaiting claims at once, or when there is nothing and wait > 0,
// waits for a publish notification (polling every PollInterval as the
// fallback) until wait passes, the client goes away or the server drains.
//
// Each try is one Claim: without opts.Partition, pgmsg's claim() picks, in
// one statement, the least recently claimed partition with unread records
// and no live claim, however many partitions the topic has. HTTP consumers
// may be stateless, claiming without group membership (they take no part
// in balancing), or members: they heartbeat (POST /v1/pubsub/heartbeat)
// and claim with member and assigned=true, from their own partitions only
// (docs/http-api.md).
func (s *Server) claimWaiting(ctx context.Context, topic, group string, opts *pgmsg.ClaimOpts, wait time.Duration) (*pgmsg.Claim, error) {
	var cl *pgmsg.Claim
	err := s.longPoll(ctx, wait, func() (<-chan struct{}, func()) { return s.client.RecordWakeups(topic) },
		func() (bool, error) {
			var err error
			cl, err = s.client.Claim(ctx, topic, group, opts)
			return cl != nil, err
		})
	return cl, err
}

// partitions returns topic's partition count.
func (s *Server) partitions(ctx context.Context, topic string) (int, error) {
	ts, err := s.client.ListTopics(ctx)
	if err != nil {
		return 0, err
	}
	for _, t := range ts {
		if t.Name == topic {
			return t.Partitions, nil
		}
	}
	return 0, newAPIError(pgmsg.ErrUnknownTopic, "unknown topic %q", topic)
}

func (s *Server) draining() bool { return s.stopCtx.Err() != nil }

// MembershipRequest is the body of POST /v1/pubsub/heartbeat and
// /v1/pubsub/leave.
type MembershipRequest struct {
	Topic  string `json:"topic"`
	Group  string `json:"group"`
	Member string `json:"member"`
	// SessionTimeout (heartbeat only): how long the group waits for the
	// next heartbeat before it moves the member's partitions. Default 10s.
	SessionTimeout *Duration `json:"session_timeout,omitempty"`
}

func (s *Server) membershipRequest(w http.ResponseWriter, r *http.Request) (*MembershipRequest, error) {
	var req MembershipRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if req.Topic == "" || req.Group == "" || req.Member == "" {
		return nil, newAPIError(errInvalidParameter, "fields \"topic\", \"group\" and \"member\" are required")
	}
	if err := authorizeGroup(r, req.Topic, req.Group); err != nil {
		return nil, err
	}
	if err := validNames("member", req.Member); err != nil {
		return nil, err
	}
	return &req, nil
}

// heartbeat keeps an HTTP consumer in its group's membership and answers
// its partitions (pgmsg.GroupAssignment).
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	req, err := s.membershipRequest(w, r)
	if err != nil {
		return err
	}
	var timeout time.Duration
	if req.SessionTimeout != nil {
		if timeout = time.Duration(*req.SessionTimeout); timeout <= 0 {
			return newAPIError(errInvalidParameter, "session_timeout must be positive")
		}
	}
	a, err := s.client.Heartbeat(r.Context(), req.Topic, req.Group, req.Member, timeout)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a)
}

// leave removes an HTTP consumer from its group at once.
func (s *Server) leave(w http.ResponseWriter, r *http.Request) error {
	req, err := s.membershipRequest(w, r)
	if err != nil {
		return err
	}
	if req.SessionTimeout != nil {
		return newAPIError(errInvalidParameter, "session_timeout is a heartbeat field")
	}
	ok, err := s.client.LeaveGroup(r.Context(), req.Topic, req.Group, req.Member)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"left": ok})
}

// ClaimRequest identifies a claim in commit, extend and release.
type ClaimRequest struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Partition *int32 `json:"partition"`
	Epoch     *int64 `json:"epoch"`
	// NextOffset (commit only) commits part of the claim: the cursor moves
	// to it and later records are delivered again.
	NextOffset *int64 `json:"next_offset,omitempty"`
	// Lease (extend only): how long from now. Default 30s.
	Lease *Duration `json:"lease,omitempty"`
}

func (s *Server) claimRequest(w http.ResponseWriter, r *http.Request) (*ClaimRequest, *pgmsg.Claim, error) {
	var req ClaimRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return nil, nil, err
	}
	switch {
	case req.Topic == "":
		return nil, nil, newAPIError(errInvalidParameter, "field \"topic\" is required")
	case req.Group == "":
		return nil, nil, newAPIError(errInvalidParameter, "field \"group\" is required")
	case req.Partition == nil:
		return nil, nil, newAPIError(errInvalidParameter, "field \"partition\" is required")
	case req.Epoch == nil:
		return nil, nil, newAPIError(errInvalidParameter, "field \"epoch\" is required")
	}
	if err := authorizeGroup(r, req.Topic, req.Group); err != nil {
		return nil, nil, err
	}
	return &req, &pgmsg.Claim{Topic: req.Topic, Group: req.Group, Partition: *req.Partition, Epoch: *req.Epoch}, nil
}

// commit advances the group past a claim (or to next_offset within it).
func (s *Server) commit(w http.ResponseWriter, r *http.Request) error {
	req, cl, err := s.claimRequest(w, r)
	if err != nil {
		return err
	}
	if req.Lease != nil {
		return newAPIError(errInvalidParameter, "field \"lease\" is for extend, not commit")
	}
	if req.NextOffset != nil {
		err = s.client.CommitOffset(r.Context(), cl, *req.NextOffset)
	} else {
		err = s.client.Commit(r.Context(), cl)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"committed": true})
}

// extend keeps a claim longer.
func (s *Server) extend(w http.ResponseWriter, r *http.Request) error {
	req, cl, err := s.claimRequest(w, r)
	if err != nil {
		return err
	}
	lease := pgmsg.ClaimLeaseDefault
	if req.Lease != nil {
		lease = time.Duration(*req.Lease)
	}
	if err := s.client.Extend(r.Context(), cl, lease); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"expires_at": cl.ExpiresAt})
}

// release gives a claim up: its records are delivered again at once.
func (s *Server) release(w http.ResponseWriter, r *http.Request) error {
	_, cl, err := s.claimRequest(w, r)
	if err != nil {
		return err
	}
	if err := s.client.Release(r.Context(), cl); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"released": true})
}
