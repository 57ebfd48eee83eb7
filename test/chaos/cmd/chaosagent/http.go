package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"
)

// The HTTP roles talk to `pgmsg serve` (which the harness kills -9 and
// restarts) instead of PostgreSQL.

var httpClient = &http.Client{Timeout: 10 * time.Second}

type apiErr struct {
	status int
	code   string
	msg    string
}

func (e *apiErr) Error() string { return fmt.Sprintf("HTTP %d %s: %s", e.status, e.code, e.msg) }

// call sends a JSON request and decodes a 200 answer into out. A transport
// error (server killed, connection refused) has code "io".
func call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, *flagHTTP+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return &apiErr{code: "io", msg: err.Error()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return &apiErr{status: resp.StatusCode, code: "io", msg: err.Error()}
	}
	if resp.StatusCode != http.StatusOK {
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(b, &eb)
		return &apiErr{status: resp.StatusCode, code: eb.Error.Code, msg: eb.Error.Message}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func httpCode(err error) string {
	if e, ok := err.(*apiErr); ok {
		switch e.code {
		case "claim_expired":
			return "PM008"
		case "claim_not_held":
			return "PM009"
		}
		return "http:" + e.code
	}
	return "io"
}

func (a *agent) produceHTTP() {
	producerID := *flagName // one per process start
	var seq int64
	tick := time.NewTicker(interval())
	defer tick.Stop()
	type rec struct {
		Key   *string         `json:"key,omitempty"`
		Value json.RawMessage `json:"value"`
	}
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-tick.C:
		}
		recs := make([]rec, *flagBatch)
		ids := make([]string, len(recs))
		keyed := rand.IntN(2) == 0
		for i := range recs {
			ids[i] = a.nextID()
			recs[i].Value, _ = json.Marshal(payload{ID: ids[i]})
			if keyed {
				k := ids[i]
				recs[i].Key = &k
			}
		}
		a.h.write(map[string]any{"k": "pubtry", "ids": ids})
		var resp struct {
			Records []struct {
				Partition int32 `json:"partition"`
				Offset    int64 `json:"offset"`
			} `json:"records"`
			Duplicate bool `json:"duplicate"`
		}
		body := map[string]any{"topic": *flagTopic, "records": recs, "producer_id": producerID, "sequence": seq}
		retries, err := a.retryIdempotent(func(ctx context.Context) error {
			return call(ctx, http.MethodPost, "/v1/pubsub/publish", body, &resp)
		}, func(err error) bool {
			// An answer other than 408, 429 or 5xx is final (409: out of order).
			var ae *apiErr
			return errors.As(err, &ae) && ae.status >= 400 && ae.status < 500 && ae.status != http.StatusRequestTimeout &&
				ae.status != http.StatusTooManyRequests
		})
		seq += int64(len(recs))
		if err == nil && len(resp.Records) != len(recs) {
			err = fmt.Errorf("publish answered %d records for %d", len(resp.Records), len(recs))
		}
		if err != nil {
			a.h.write(map[string]any{"k": "puberr", "ids": ids, "code": httpCode(err), "err": err.Error()})
			a.pause(100 * time.Millisecond)
			continue
		}
		evs := make([]map[string]any, len(recs))
		for i, r := range resp.Records {
			evs[i] = map[string]any{"k": "pub", "id": ids[i], "p": r.Partition, "o": r.Offset}
		}
		if retries > 0 {
			evs = append(evs, map[string]any{"k": "pubretried", "n": len(recs), "dup": resp.Duplicate})
		}
		a.h.write(evs...)
	}
}

func (a *agent) consumeHTTP() {
	q := url.Values{"topic": {*flagTopic}, "group": {*flagGroup}, "max_records": {"50"}, "wait": {"1s"},
		"lease": {flagLease.String()}, "member": {*flagName}, "encoding": {"json"}}
	for a.ctx.Err() == nil {
		var resp struct {
			Claim *struct {
				Partition int32 `json:"partition"`
				Epoch     int64 `json:"epoch"`
			} `json:"claim"`
			Records []struct {
				Partition int32           `json:"partition"`
				Offset    int64           `json:"offset"`
				Value     json.RawMessage `json:"value"`
			} `json:"records"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := call(ctx, http.MethodGet, "/v1/pubsub/consume?"+q.Encode(), nil, &resp)
		cancel()
		if err != nil {
			a.h.write(map[string]any{"k": "claimerr", "g": *flagGroup, "code": httpCode(err), "err": err.Error()})
			a.pause(200 * time.Millisecond)
			continue
		}
		if resp.Claim == nil || len(resp.Records) == 0 {
			continue
		}
		cl := resp.Claim
		now := time.Now().UnixNano()
		evs := make([]map[string]any, len(resp.Records))
		for i, r := range resp.Records {
			evs[i] = map[string]any{"k": "recv", "g": *flagGroup, "m": *flagName, "p": r.Partition, "o": r.Offset,
				"e": cl.Epoch, "id": idOf(r.Value), "t": now}
		}
		a.h.write(evs...)
		a.pause(time.Duration(rand.Int64N(int64(*flagWork) + 1)))
		sent := time.Now().UnixNano()
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = call(ctx, http.MethodPost, "/v1/pubsub/commit",
			map[string]any{"topic": *flagTopic, "group": *flagGroup, "partition": cl.Partition, "epoch": cl.Epoch}, nil)
		cancel()
		ev := map[string]any{"g": *flagGroup, "m": *flagName, "p": cl.Partition, "e": cl.Epoch,
			"from": resp.Records[0].Offset, "to": resp.Records[len(resp.Records)-1].Offset, "sent": sent}
		if err != nil {
			ev["k"], ev["code"], ev["err"] = "commiterr", httpCode(err), err.Error()
		} else {
			ev["k"] = "commit"
		}
		a.h.write(ev)
	}
}
