package httpapi

import (
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// HTTP consumers as group members: heartbeats spread the partitions,
// assigned=true claims from the member's own only, leave hands them back.
func TestMembershipHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "orders", 2)
	token := tb.token(t, "billing", "consume:orders/group:billing")
	beat := func(member string) pgmsg.GroupAssignment {
		t.Helper()
		r := tb.do(t, http.MethodPost, "/v1/pubsub/heartbeat", token,
			map[string]any{"topic": "orders", "group": "billing", "member": member, "session_timeout": "30s"})
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var a pgmsg.GroupAssignment
		r.json(t, &a)
		return a
	}
	a1 := beat("m1")
	require.True(t, a1.Joined)
	require.ElementsMatch(t, []int32{0, 1}, a1.Partitions)
	require.True(t, beat("m2").Joined)
	a1, a2 := beat("m1"), beat("m2")
	require.False(t, a1.Joined)
	require.Len(t, a1.Partitions, 1)
	require.Len(t, a2.Partitions, 1)
	require.NotEqual(t, a1.Partitions[0], a2.Partitions[0])

	var recs []*pgmsg.Record
	for p := range int32(2) {
		for range 3 {
			recs = append(recs, &pgmsg.Record{Topic: "orders", Partition: p, Value: []byte(`{}`)})
		}
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	var resp ConsumeResponse
	r := tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=orders&group=billing&member=m1&assigned=true&max_records=10", token, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &resp)
	require.Len(t, resp.Records, 3)
	for _, rec := range resp.Records {
		require.Equal(t, a1.Partitions[0], rec.Partition, "only the member's partition")
	}

	r = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=orders&group=billing&assigned=true", token, nil)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	r = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=orders&group=billing&member=m3&assigned=true", token, nil)
	require.Equal(t, "not_member", r.errorCode(t))
	other := tb.token(t, "shipping", "consume:orders/group:shipping")
	r = tb.do(t, http.MethodPost, "/v1/pubsub/heartbeat", other, map[string]any{"topic": "orders", "group": "billing", "member": "x"})
	require.Equal(t, http.StatusForbidden, r.status)
	r = tb.do(t, http.MethodPost, "/v1/pubsub/heartbeat", token, map[string]any{"topic": "orders", "group": "billing"})
	require.Equal(t, http.StatusBadRequest, r.status)
	r = tb.do(t, http.MethodPost, "/v1/pubsub/heartbeat", token, map[string]any{"topic": "orders", "group": "billing", "member": "bad name"})
	require.Equal(t, http.StatusBadRequest, r.status)

	r = tb.do(t, http.MethodPost, "/v1/pubsub/leave", token, map[string]any{"topic": "orders", "group": "billing", "member": "m2"})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var left struct {
		Left bool `json:"left"`
	}
	r.json(t, &left)
	require.True(t, left.Left)
	a1 = beat("m1")
	got := append(a1.Partitions, a1.Revoking...)
	slices.Sort(got)
	require.Equal(t, []int32{0, 1}, got, "m2's partition came back to m1")
}
