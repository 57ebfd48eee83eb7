package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// The conformance suite runs the same scenarios through the Go library and
// through the HTTP server; both must behave alike. Scenarios:
//
//   - PublishConsumeTwoGroups: keyed records land by key; two groups each
//     read everything in per-partition offset order; nothing after commit.
//   - RedeliveryAfterLeaseExpires: an uncommitted claim comes back once
//     its lease runs out, with the same records.
//   - ReleaseRedeliversAtOnce: a released claim is claimable immediately.
//   - PartialCommit: committing a next offset inside the claim redelivers
//     the rest.
//   - LongPollWakesOnPublish: a waiting consume returns the record
//     published while it waits.
//   - CommitAfterResetFails: a claim fenced by a group reset cannot be
//     committed (claim_not_held) and nothing moves.
//   - ErrorsAgree: unknown topic, bad names, empty batch, bad partition map
//     to the same codes.
//   - Queue scenarios: see queueScenarios (queue_conformance_test.go).
var scenarios = []struct {
	name string
	run  func(t *testing.T, tb *testBundle, d driver)
}{
	{"PublishConsumeTwoGroups", scenarioPublishConsumeTwoGroups},
	{"RedeliveryAfterLeaseExpires", scenarioRedelivery},
	{"ReleaseRedeliversAtOnce", scenarioRelease},
	{"PartialCommit", scenarioPartialCommit},
	{"LongPollWakesOnPublish", scenarioLongPoll},
	{"CommitAfterResetFails", scenarioCommitAfterReset},
	{"ErrorsAgree", scenarioErrors},
}

// crec is a record as the scenarios see it.
type crec struct {
	Key       string
	Value     string
	Partition int32
	Offset    int64
}

type cclaim struct {
	Topic, Group string
	Partition    int32
	Epoch        int64
	Records      []crec
}

// driver is one way of using pgmsg. Errors come back as the API's stable
// codes so that both drivers can be compared.
type driver interface {
	publish(topic string, recs []crec) ([]crec, string)
	consume(topic, group string, max int, wait, lease time.Duration) (*cclaim, string)
	commit(cl *cclaim, next *int64) string
	release(cl *cclaim) string
	reset(topic, group, to string) string
}

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	_, code, _ := errorFor(err)
	return code
}

// libDriver uses *pgmsg.Client directly.
type libDriver struct {
	ctx context.Context
	c   *pgmsg.Client
}

func (d libDriver) publish(topic string, recs []crec) ([]crec, string) {
	in := make([]*pgmsg.Record, len(recs))
	for i, r := range recs {
		in[i] = &pgmsg.Record{Topic: topic, Value: []byte(r.Value)}
		if r.Key != "" {
			in[i].Key = []byte(r.Key)
		}
	}
	if err := d.c.Publish(d.ctx, in, nil); err != nil {
		return nil, codeOf(err)
	}
	out := make([]crec, len(recs))
	for i, r := range in {
		out[i] = crec{Key: string(r.Key), Value: string(r.Value), Partition: r.Partition, Offset: r.Offset}
	}
	return out, ""
}

func (d libDriver) consume(topic, group string, max int, wait, lease time.Duration) (*cclaim, string) {
	opts := &pgmsg.ClaimOpts{MaxRecords: max, Lease: lease}
	var cl *pgmsg.Claim
	var err error
	cl, err = d.c.Claim(d.ctx, topic, group, opts)
	if err == nil && cl == nil && wait > 0 {
		// Wait as a stateless reader: every partition assigned by hand, no
		// group membership (what the HTTP server does).
		var parts []int32
		ts, _ := d.c.ListTopics(d.ctx)
		for _, tp := range ts {
			if tp.Name == topic {
				for p := range int32(tp.Partitions) {
					parts = append(parts, p)
				}
			}
		}
		var cn *pgmsg.Consumer
		cn, err = d.c.NewConsumer(topic, group, &pgmsg.ConsumerOpts{Claim: *opts, Partitions: parts})
		if err == nil {
			ctx, cancel := context.WithTimeout(d.ctx, wait)
			cl, err = cn.Poll(ctx)
			cancel()
			cn.Close()
			if errors.Is(err, context.DeadlineExceeded) {
				cl, err = nil, nil
			}
		}
	}
	if err != nil || cl == nil {
		return nil, codeOf(err)
	}
	out := &cclaim{Topic: topic, Group: group, Partition: cl.Partition, Epoch: cl.Epoch}
	for _, r := range cl.Records {
		out.Records = append(out.Records, crec{Key: string(r.Key), Value: string(r.Value), Partition: r.Partition, Offset: r.Offset})
	}
	return out, ""
}

func (d libDriver) claimOf(cl *cclaim) *pgmsg.Claim {
	return &pgmsg.Claim{Topic: cl.Topic, Group: cl.Group, Partition: cl.Partition, Epoch: cl.Epoch}
}

func (d libDriver) commit(cl *cclaim, next *int64) string {
	if next != nil {
		return codeOf(d.c.CommitOffset(d.ctx, d.claimOf(cl), *next))
	}
	return codeOf(d.c.Commit(d.ctx, d.claimOf(cl)))
}

func (d libDriver) release(cl *cclaim) string { return codeOf(d.c.Release(d.ctx, d.claimOf(cl))) }

func (d libDriver) reset(topic, group, to string) string {
	_, err := d.c.ResetGroup(d.ctx, topic, group, to, nil)
	return codeOf(err)
}

// httpDriver uses the HTTP API with a token.
type httpDriver struct {
	t     *testing.T
	tb    *testBundle
	token string
}

func (d httpDriver) errCode(res response) string {
	if res.status/100 == 2 {
		return ""
	}
	return res.errorCode(d.t)
}

func (d httpDriver) publish(topic string, recs []crec) ([]crec, string) {
	req := PublishRequest{Topic: topic, Encoding: wire.EncodingText}
	for _, r := range recs {
		pr := PublishRecord{Value: []byte(strconv.Quote(r.Value))}
		if r.Key != "" {
			k := r.Key
			pr.Key = &k
		}
		req.Records = append(req.Records, pr)
	}
	res := d.tb.do(d.t, http.MethodPost, "/v1/pubsub/publish", d.token, req)
	if code := d.errCode(res); code != "" {
		return nil, code
	}
	var pr PublishResponse
	res.json(d.t, &pr)
	require.Equal(d.t, topic, pr.Topic)
	out := make([]crec, len(recs))
	for i, r := range recs {
		out[i] = crec{Key: r.Key, Value: r.Value, Partition: pr.Records[i].Partition, Offset: pr.Records[i].Offset}
	}
	return out, ""
}

func (d httpDriver) consume(topic, group string, max int, wait, lease time.Duration) (*cclaim, string) {
	q := url.Values{"topic": {topic}, "group": {group}, "max_records": {strconv.Itoa(max)}, "encoding": {wire.EncodingText}}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	if lease > 0 {
		q.Set("lease", lease.String())
	}
	res := d.tb.do(d.t, http.MethodGet, "/v1/pubsub/consume?"+q.Encode(), d.token, nil)
	if code := d.errCode(res); code != "" {
		return nil, code
	}
	var cr ConsumeResponse
	res.json(d.t, &cr)
	if cr.Claim == nil {
		require.Empty(d.t, cr.Records)
		return nil, ""
	}
	out := &cclaim{Topic: topic, Group: group, Partition: cr.Claim.Partition, Epoch: cr.Claim.Epoch}
	for _, r := range cr.Records {
		require.Equal(d.t, wire.EncodingText, r.ValueEncoding)
		v, err := strconv.Unquote(string(r.Value))
		require.NoError(d.t, err)
		k := ""
		if r.Key != nil {
			k = *r.Key
		}
		out.Records = append(out.Records, crec{Key: k, Value: v, Partition: r.Partition, Offset: r.Offset})
	}
	require.Equal(d.t, out.Records[0].Offset, cr.Claim.StartOffset)
	require.Equal(d.t, out.Records[len(out.Records)-1].Offset+1, cr.Claim.NextOffset)
	return out, ""
}

func (d httpDriver) claimBody(cl *cclaim) ClaimRequest {
	p, e := cl.Partition, cl.Epoch
	return ClaimRequest{Topic: cl.Topic, Group: cl.Group, Partition: &p, Epoch: &e}
}

func (d httpDriver) commit(cl *cclaim, next *int64) string {
	body := d.claimBody(cl)
	body.NextOffset = next
	return d.errCode(d.tb.do(d.t, http.MethodPost, "/v1/pubsub/commit", d.token, body))
}

func (d httpDriver) release(cl *cclaim) string {
	return d.errCode(d.tb.do(d.t, http.MethodPost, "/v1/pubsub/release", d.token, d.claimBody(cl)))
}

func (d httpDriver) reset(topic, group, to string) string {
	return d.errCode(d.tb.do(d.t, http.MethodPost, "/v1/topics/"+topic+"/groups/"+group+"/reset", d.token, ResetGroupRequest{To: to}))
}

func TestConformance(t *testing.T) {
	t.Parallel()
	drivers := map[string]func(t *testing.T, tb *testBundle) driver{
		"library": func(t *testing.T, tb *testBundle) driver { return libDriver{ctx: tb.ctx, c: tb.client} },
		"http": func(t *testing.T, tb *testBundle) driver {
			return httpDriver{t: t, tb: tb, token: tb.token(t, "conformance", "publish:*", "consume:*", "enqueue:*", "claim:*", "admin")}
		},
	}
	for _, sc := range append(scenarios, queueScenarios...) {
		for _, dname := range []string{"library", "http"} {
			t.Run(sc.name+"/"+dname, func(t *testing.T) {
				t.Parallel()
				tb := setup(t, nil)
				sc.run(t, tb, drivers[dname](t, tb))
			})
		}
	}
}

func keyed(n int) []crec {
	users := []string{"alice", "bob", "carol", "dave"}
	out := make([]crec, n)
	for i := range out {
		out[i] = crec{Key: users[i%len(users)], Value: fmt.Sprintf("event-%d", i)}
	}
	return out
}

func scenarioPublishConsumeTwoGroups(t *testing.T, tb *testBundle, d driver) {
	tb.topic(t, "orders", 3)
	pub, code := d.publish("orders", keyed(12))
	require.Empty(t, code)
	for _, r := range pub {
		require.Equal(t, pgmsg.PartitionForKey([]byte(r.Key), 3), r.Partition, "key %s", r.Key)
	}
	for _, group := range []string{"billing", "audit"} {
		var got []crec
		for {
			cl, code := d.consume("orders", group, 5, 0, 0)
			require.Empty(t, code)
			if cl == nil {
				break
			}
			for i := 1; i < len(cl.Records); i++ {
				require.Equal(t, cl.Records[i-1].Offset+1, cl.Records[i].Offset)
			}
			got = append(got, cl.Records...)
			require.Empty(t, d.commit(cl, nil))
		}
		require.ElementsMatch(t, pub, got, "group %s", group)
		cl, code := d.consume("orders", group, 5, 0, 0)
		require.Empty(t, code)
		require.Nil(t, cl)
	}
}

func scenarioRedelivery(t *testing.T, tb *testBundle, d driver) {
	tb.topic(t, "t", 1)
	_, code := d.publish("t", []crec{{Value: "a"}, {Value: "b"}})
	require.Empty(t, code)
	first, code := d.consume("t", "g", 10, 0, 300*time.Millisecond)
	require.Empty(t, code)
	require.Len(t, first.Records, 2)
	// Not committed: the records come back once the lease runs out (the
	// long poll waits for that; the lease is far shorter than the wait).
	again, code := d.consume("t", "g", 10, 20*time.Second, 0)
	require.Empty(t, code)
	require.NotNil(t, again)
	require.Equal(t, first.Records, again.Records)
	require.NotEqual(t, first.Epoch, again.Epoch)
	require.Equal(t, "claim_not_held", d.commit(first, nil), "claimed again by then")
	require.Empty(t, d.commit(again, nil))
}

func scenarioRelease(t *testing.T, tb *testBundle, d driver) {
	tb.topic(t, "t", 1)
	_, code := d.publish("t", []crec{{Value: "a"}})
	require.Empty(t, code)
	cl, _ := d.consume("t", "g", 10, 0, time.Hour)
	require.NotNil(t, cl)
	none, _ := d.consume("t", "g", 10, 0, 0)
	require.Nil(t, none, "a held claim is not handed out twice")
	require.Empty(t, d.release(cl))
	again, _ := d.consume("t", "g", 10, 0, 0)
	require.NotNil(t, again)
	require.Equal(t, cl.Records, again.Records)
	require.Equal(t, "claim_not_held", d.release(cl))
}

func scenarioPartialCommit(t *testing.T, tb *testBundle, d driver) {
	tb.topic(t, "t", 1)
	_, code := d.publish("t", []crec{{Value: "a"}, {Value: "b"}, {Value: "c"}})
	require.Empty(t, code)
	cl, _ := d.consume("t", "g", 10, 0, 0)
	require.Len(t, cl.Records, 3)
	next := int64(1)
	require.Empty(t, d.commit(cl, &next))
	rest, _ := d.consume("t", "g", 10, 0, 0)
	require.Equal(t, []string{"b", "c"}, values(rest.Records))
	bad := int64(99)
	require.Equal(t, "invalid_offset", d.commit(rest, &bad))
}

func scenarioLongPoll(t *testing.T, tb *testBundle, d driver) {
	tb.topic(t, "t", 2)
	type result struct {
		cl   *cclaim
		code string
	}
	done := make(chan result, 1)
	go func() {
		cl, code := d.consume("t", "g", 10, 20*time.Second, 0)
		done <- result{cl, code}
	}()
	// Publish until the poller has it: a publish before the poller's first
	// claim is fine too (the group starts at earliest).
	_, code := d.publish("t", []crec{{Key: "k", Value: "woken"}})
	require.Empty(t, code)
	select {
	case res := <-done:
		require.Empty(t, res.code)
		require.NotNil(t, res.cl)
		require.Equal(t, []string{"woken"}, values(res.cl.Records))
	case <-tb.ctx.Done():
		t.Fatal("long poll did not return")
	}
}

func scenarioCommitAfterReset(t *testing.T, tb *testBundle, d driver) {
	tb.topic(t, "t", 1)
	_, code := d.publish("t", []crec{{Value: "a"}, {Value: "b"}})
	require.Empty(t, code)
	cl, _ := d.consume("t", "g", 10, 0, 0)
	require.NotNil(t, cl)
	require.Empty(t, d.reset("t", "g", "latest"))
	require.Equal(t, "claim_not_held", d.commit(cl, nil))
	none, _ := d.consume("t", "g", 10, 0, 0)
	require.Nil(t, none)
	require.Equal(t, "unknown_group", d.reset("t", "nope", "earliest"))
}

func scenarioErrors(t *testing.T, tb *testBundle, d driver) {
	tb.topic(t, "t", 2)
	_, code := d.publish("missing", []crec{{Value: "x"}})
	require.Equal(t, "unknown_topic", code)
	_, code = d.publish("t", nil)
	require.Equal(t, "empty_batch", code)
	_, code = d.consume("missing", "g", 1, 0, 0)
	require.Equal(t, "unknown_topic", code)
	_, code = d.consume("t", "bad group!", 1, 0, 0)
	require.Equal(t, "invalid_name", code)
	require.Equal(t, "unknown_group", d.commit(&cclaim{Topic: "t", Group: "none", Partition: 0, Epoch: 1}, nil))
	require.Equal(t, "unknown_topic", d.commit(&cclaim{Topic: "missing", Group: "g", Partition: 0, Epoch: 1}, nil))
}

func values(recs []crec) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Value
	}
	sort.Strings(out)
	return out
}
