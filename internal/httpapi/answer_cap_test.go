package httpapi

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// One consume or claim could hand out max_records x the largest
// record (100 x 1 MB made a 133 MB answer; the defaults allowed ~5 GB).
// MaxAnswerBytes caps the stored bytes of an answer, in the claim itself:
// nothing past the cap is leased, and at least one record or job is always
// handed out. max_bytes may only lower the cap.
func TestConsumeAnswerCapped(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{MaxAnswerBytes: 3000})
	tb.topic(t, "t", 1)
	var recs []*pgmsg.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "t", Value: bytes.Repeat([]byte{'a' + byte(i)}, 1000)})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))

	consume := func(group, extra string) ConsumeResponse {
		t.Helper()
		res := tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group="+group+"&max_records=100&encoding=base64"+extra, tb.admin, nil)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		var out ConsumeResponse
		res.json(t, &out)
		return out
	}
	out := consume("g1", "")
	require.Equal(t, 3, len(out.Records), "the server's cap: 3 x 1000 bytes")
	require.Equal(t, int64(2), out.Records[2].Offset)
	// The claim itself ends at the cap: it leases [0, 3), so committing it
	// moves the cursor to 3, and the next consume starts there.
	require.Equal(t, int64(3), out.Claim.NextOffset)
	res := tb.do(t, http.MethodPost, "/v1/pubsub/commit", tb.admin, map[string]any{
		"topic": "t", "group": "g1", "partition": 0, "epoch": out.Claim.Epoch})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	out = consume("g1", "&max_bytes=2000")
	require.Equal(t, 2, len(out.Records))
	require.Equal(t, int64(3), out.Records[0].Offset)

	// At least one record, even over the cap.
	out = consume("g2", "&max_bytes=1")
	require.Equal(t, 1, len(out.Records))

	for _, c := range []struct{ q, code string }{
		{"&max_bytes=3001", "limit_exceeded"},
		{"&max_bytes=0", "invalid_parameter"},
		{"&max_bytes=-5", "invalid_parameter"},
		{"&max_bytes=lots", "invalid_parameter"},
	} {
		res := tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g3"+c.q, tb.admin, nil)
		require.Equal(t, http.StatusBadRequest, res.status, c.q)
		require.Equal(t, c.code, res.errorCode(t), c.q)
	}
	gs, err := tb.client.ListGroups(tb.ctx, "t", "g3")
	require.NoError(t, err)
	require.Empty(t, gs, "a refused consume creates no group")
}

func TestClaimAnswerCapped(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{MaxAnswerBytes: 3000})
	for i := 0; i < 10; i++ {
		_, err := tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: bytes.Repeat([]byte{'x'}, 1000)}, nil)
		require.NoError(t, err)
	}
	claim := func(extra string) int {
		t.Helper()
		res := tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q&max=10"+extra, tb.admin, nil)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		var out struct {
			Jobs []wire.JobJSON `json:"jobs"`
		}
		res.json(t, &out)
		return len(out.Jobs)
	}
	require.Equal(t, 3, claim(""), "the server's cap: 3 x 1000 bytes")
	st, err := tb.client.QueueStats(tb.ctx, "q")
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Running, "nothing past the cap is leased")
	require.Equal(t, int64(7), st.Available)
	require.Equal(t, 2, claim("&max_bytes=2500"))
	require.Equal(t, 1, claim("&max_bytes=1"), "at least one job, even over the cap")

	for _, c := range []struct{ q, code string }{
		{"&max_bytes=3001", "limit_exceeded"},
		{"&max_bytes=0", "invalid_parameter"},
		{"&max_bytes=1e3", "invalid_parameter"},
	} {
		res := tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q"+c.q, tb.admin, nil)
		require.Equal(t, http.StatusBadRequest, res.status, c.q)
		require.Equal(t, c.code, res.errorCode(t), c.q)
	}
	st, err = tb.client.QueueStats(tb.ctx, "q")
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Available, "refused claims lease nothing")
}

func TestMaxAnswerBytesDefault(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	require.Equal(t, int64(16<<20), tb.server.cfg.MaxAnswerBytes)
	_, err := New(Config{Client: tb.client, MaxAnswerBytes: -1})
	require.Error(t, err)
}
