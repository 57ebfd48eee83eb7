package kafkasrv_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// rawConn speaks the framing by hand, to send what clients would not.
type rawConn struct {
	net.Conn
	corr int32
}

func dialRaw(t *testing.T, tb *testBundle) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", tb.addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(time.Minute)))
	return &rawConn{Conn: c}
}

// frame encodes req as a request frame (header v1, or v2 when flexible).
func (rc *rawConn) frame(req kmsg.Request) []byte {
	rc.corr++
	b := make([]byte, 4, 64)
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(rc.corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func (rc *rawConn) send(t *testing.T, frame []byte) {
	t.Helper()
	_, err := rc.Write(frame)
	require.NoError(t, err)
}

// read reads one response frame's body (after the correlation id).
func (rc *rawConn) read(t *testing.T) (corr int32, body []byte, err error) {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(rc, size[:]); err != nil {
		return 0, nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(rc, buf); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(buf)), buf[4:], nil
}

// roundTrip sends req and decodes its response.
func (rc *rawConn) roundTrip(t *testing.T, req kmsg.Request) kmsg.Response {
	t.Helper()
	rc.send(t, rc.frame(req))
	corr, body, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, rc.corr, corr)
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		require.Equal(t, byte(0), body[0], "no header tags")
		body = body[1:]
	}
	require.NoError(t, resp.ReadFrom(body))
	return resp
}

// requireClosed asserts the server closed the connection.
func (rc *rawConn) requireClosed(t *testing.T) {
	t.Helper()
	_, _, err := rc.read(t)
	require.Error(t, err)
	var ne net.Error
	if errorsAs(err, &ne) {
		require.False(t, ne.Timeout(), "the server must close, not hang")
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// An answer goes out as soon as it is ready, not when the requests read
// after it are answered too: with a Fetch long-polling behind it, the
// ApiVersions answer before it arrives at once (a producer pipelining
// five requests had its acknowledgements held until its pipeline ran
// dry).
func TestAnswerNotHeldBehindPendingRequest(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "w", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	rc := dialRaw(t, tb)
	versions := kmsg.NewPtrApiVersionsRequest()
	versions.Version = 0
	frames := rc.frame(versions)
	// The Fetch waits a minute for a record nobody publishes.
	frames = append(frames, rc.frame(fetchReq("w", time.Minute, 1, 1<<20, map[int32]int64{0: 0}, 1<<20))...)
	rc.send(t, frames)
	require.NoError(t, rc.SetReadDeadline(time.Now().Add(30*time.Second)))
	corr, _, err := rc.read(t)
	require.NoError(t, err, "the ApiVersions answer waited for the Fetch behind it")
	require.Equal(t, int32(1), corr)
}
