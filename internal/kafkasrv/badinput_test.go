package kafkasrv_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// Bad frames close the connection (or, for ApiVersions, answer Kafka's
// downgrade); none stores anything or stops the server.
func TestBadFrames(t *testing.T) {
	t.Parallel()
	tb := setup(t, &kafkasrv.Config{MaxRequestBytes: 1 << 20})
	_, err := tb.Client.CreateTopic(tb.Ctx, "bad", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)

	header := func(key, version int16) []byte {
		b := make([]byte, 4)
		b = binary.BigEndian.AppendUint16(b, uint16(key))
		b = binary.BigEndian.AppendUint16(b, uint16(version))
		b = binary.BigEndian.AppendUint32(b, 7)
		b = binary.BigEndian.AppendUint16(b, 0xffff) // null client id
		return b
	}
	finish := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return b
	}

	t.Run("unknown key", func(t *testing.T) {
		rc := dialRaw(t, tb)
		rc.send(t, finish(header(999, 0)))
		rc.requireClosed(t)
	})
	t.Run("unserved version", func(t *testing.T) {
		rc := dialRaw(t, tb)
		rc.send(t, finish(append(header(0, 2), 0xff, 0xff, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)))
		rc.requireClosed(t)
	})
	t.Run("api versions too new", func(t *testing.T) {
		rc := dialRaw(t, tb)
		rc.send(t, finish(header(18, 99)))
		corr, body, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, int32(7), corr)
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.Version = 0
		require.NoError(t, resp.ReadFrom(body))
		require.Equal(t, kerr.UnsupportedVersion.Code, resp.ErrorCode)
		require.NotEmpty(t, resp.ApiKeys)
		// The connection serves on.
		require.NotEmpty(t, rc.roundTrip(t, kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse).ApiKeys)
	})
	t.Run("oversize", func(t *testing.T) {
		// Only the size is sent: the server refuses it without waiting
		// for (or allocating) the 2 GiB announced.
		rc := dialRaw(t, tb)
		rc.send(t, []byte{0x7f, 0xff, 0xff, 0xff})
		rc.requireClosed(t)
		rc = dialRaw(t, tb)
		rc.send(t, []byte{0, 0x10, 0, 1}) // MaxRequestBytes + 1
		rc.requireClosed(t)
	})
	t.Run("undersize", func(t *testing.T) {
		rc := dialRaw(t, tb)
		rc.send(t, []byte{0, 0, 0, 3, 0, 18, 0})
		rc.requireClosed(t)
	})
	t.Run("malformed body", func(t *testing.T) {
		rc := dialRaw(t, tb)
		rc.send(t, finish(append(header(3, 9), 0x05, 0x01)))
		rc.requireClosed(t)
	})
	t.Run("truncated produce", func(t *testing.T) {
		rc := dialRaw(t, tb)
		req := produceReq("bad", 0, rawBatch(-1, -1, -1, time.Now().UnixMilli(), rawRecord{value: []byte("x")}))
		f := rc.frame(req)
		binary.BigEndian.PutUint32(f, uint32(len(f)-4-10)) // the frame ends inside the batch
		rc.send(t, f[:len(f)-10])
		rc.requireClosed(t)
	})
	require.Equal(t, int64(0), endOffset(t, tb, "bad", 0), "nothing stored")

	// The server still serves.
	rc := dialRaw(t, tb)
	md := rc.roundTrip(t, kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse)
	require.Len(t, md.Brokers, 1)
}
