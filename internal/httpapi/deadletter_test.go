package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// GET .../groups/{group}/dlq lists a group's dead letters; POST
// .../dlq/replay publishes them back once; both need the admin scope.
func TestDeadLettersHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "orders", 2)
	tb.topic(t, "orders.dlq", 2)
	dead := func(group, offset string) *pgmsg.Record {
		return &pgmsg.Record{Topic: "orders.dlq", Partition: 1, Key: []byte("k"), Value: []byte(`{"n":` + offset + `}`),
			Headers: map[string][]byte{
				pgmsg.DeadLetterHeaderTopic: []byte("orders"), pgmsg.DeadLetterHeaderPartition: []byte("1"),
				pgmsg.DeadLetterHeaderOffset: []byte(offset), pgmsg.DeadLetterHeaderGroup: []byte(group),
				pgmsg.DeadLetterHeaderError: []byte("boom"), pgmsg.DeadLetterHeaderDeliveries: []byte("5"),
			}}
	}
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{dead("billing", "7"), dead("shipping", "8"), dead("billing", "9")},
		&pgmsg.PublishOpts{ManualPartition: true}))

	consumer := tb.token(t, "c", "consume:orders")
	require.Equal(t, http.StatusForbidden, tb.do(t, http.MethodGet, "/v1/topics/orders/groups/billing/dlq", consumer, nil).status)
	var list struct {
		DeadLetters []wire.DeadLetterJSON `json:"dead_letters"`
		Truncated   bool                  `json:"truncated"`
	}
	r := tb.do(t, http.MethodGet, "/v1/topics/orders/groups/billing/dlq", tb.admin, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &list)
	require.False(t, list.Truncated)
	require.Len(t, list.DeadLetters, 2)
	require.Equal(t, int64(7), list.DeadLetters[0].Offset)
	require.Equal(t, "boom", list.DeadLetters[0].Error)
	require.Equal(t, 5, list.DeadLetters[0].Deliveries)
	require.JSONEq(t, `{"n":7}`, string(list.DeadLetters[0].DeadLetter.Value))
	tb.do(t, http.MethodGet, "/v1/topics/orders/groups/billing/dlq?limit=1", tb.admin, nil).json(t, &list)
	require.Len(t, list.DeadLetters, 1)

	r = tb.do(t, http.MethodPost, "/v1/topics/orders/groups/billing/dlq/replay", tb.admin, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var replayed struct {
		Replayed int `json:"replayed"`
	}
	r.json(t, &replayed)
	require.Equal(t, 2, replayed.Replayed)
	tb.do(t, http.MethodPost, "/v1/topics/orders/groups/billing/dlq/replay", tb.admin, nil).json(t, &replayed)
	require.Zero(t, replayed.Replayed)
	back, err := tb.client.Fetch(tb.ctx, "orders", 1, 0, 10)
	require.NoError(t, err)
	require.Len(t, back, 2)
	require.Equal(t, "billing", string(back[0].Headers[pgmsg.ReplayHeaderGroup]))

	for _, path := range []string{
		"/v1/topics/orders/groups/billing/dlq?limit=0",
		"/v1/topics/orders/groups/billing/dlq?limit=x",
		"/v1/topics/orders/groups/billing/dlq?encoding=hex",
		"/v1/topics/orders/groups/billing/dlq?dead_letter_topic=bad%20name",
		"/v1/topics/orders/groups/bad%20name/dlq",
	} {
		require.Equal(t, http.StatusBadRequest, tb.do(t, http.MethodGet, path, tb.admin, nil).status, path)
	}
	r = tb.do(t, http.MethodGet, "/v1/topics/orders/groups/billing/dlq?limit=1000000", tb.admin, nil)
	require.Equal(t, "limit_exceeded", r.errorCode(t))
	tb.topic(t, "other", 1)
	tb.do(t, http.MethodGet, "/v1/topics/other/groups/billing/dlq", tb.admin, nil).json(t, &list)
	require.Empty(t, list.DeadLetters, "no dead-letter topic: none")
	require.Equal(t, "unknown_topic", tb.do(t, http.MethodGet, "/v1/topics/nope/groups/billing/dlq", tb.admin, nil).errorCode(t))
	require.Equal(t, "unknown_topic", tb.do(t, http.MethodPost, "/v1/topics/nope/groups/billing/dlq/replay", tb.admin, nil).errorCode(t))
}
