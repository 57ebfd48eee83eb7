package kafkacompat

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/cli"
	"github.com/pgmsg/pgmsg/internal/conformance"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/testbundle"
	"github.com/pgmsg/pgmsg/internal/testtls"
	"github.com/pgmsg/pgmsg/pgmsgkafka"
)

// TestPgmsgKafkaOverListenerTLS runs the log interfaces' conformance suite
// with pgmsgkafka (franz-go underneath) against pgmsg's own Kafka listener
// with mutual TLS: pgmsg's Kafka backend works against pgmsg speaking
// Kafka, through TLSConfig's CA file and client certificate.
func TestPgmsgKafkaOverListenerTLS(t *testing.T) {
	certs := testtls.New(t)
	s := startPgmsgServer(t, kafkasrv.Config{TLS: certs.Server(true)}, 5*time.Minute)
	tlsCfg := &pgmsgkafka.TLSConfig{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}
	conformance.Run(t, conformance.Harness{
		New: func(t *testing.T) pgmsg.Backend {
			b, err := pgmsgkafka.New(&pgmsgkafka.Config{Brokers: []string{s.addr}, TLS: tlsCfg})
			require.NoError(t, err)
			return b
		},
		Consumer: pgmsg.LogConsumerOpts{HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
			RedeliveryBackoff: 10 * time.Millisecond},
	})
}

// TestMirrorIntoListenerTLS runs pgmsg mirror (the CLI, with its TLS
// flags) from one pgmsg schema into another through the second one's
// Kafka listener with mutual TLS: every record arrives at its partition
// and offset with its key, value, headers and timestamp. Without the
// client certificate the mirror fails and copies nothing.
func TestMirrorIntoListenerTLS(t *testing.T) {
	certs := testtls.New(t)
	dst := startPgmsgServer(t, kafkasrv.Config{TLS: certs.Server(true)}, 5*time.Minute)
	src := testbundle.New(t, &testbundle.Opts{MaxConns: 8})
	ctx := src.Ctx
	_, err := src.Client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 3})
	require.NoError(t, err)
	base := time.UnixMilli(1764979200000)
	var recs []*pgmsg.Record
	for i := range 300 {
		r := &pgmsg.Record{Topic: "orders", Key: []byte("customer-" + string(rune('a'+i%11))),
			Value: []byte("order-" + string(rune('A'+i%26))), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		if i%3 == 0 {
			r.Headers = map[string][]byte{"trace": []byte("t"), "n": {byte(i)}}
		}
		recs = append(recs, r)
	}
	require.NoError(t, src.Client.Publish(ctx, recs, nil))

	args := []string{"mirror", "--database-url", src.URL, "--schema", src.Schema, "--brokers", dst.addr,
		"--topics", "orders", "--create-topics", "--drain", "--progress", "0", "--tls-ca", certs.CAFile}
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 1, code, "no client certificate: %s", stderr.String())
	_, err = dst.Client.DescribeTopic(ctx, "orders")
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic, "nothing reached the listener")

	stderr.Reset()
	code = cli.Main(append(args, "--tls-cert", certs.ClientCertFile, "--tls-key", certs.ClientKeyFile),
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	for p := int32(0); p < 3; p++ {
		want, err := src.Client.Fetch(context.Background(), "orders", p, 0, 1000)
		require.NoError(t, err)
		got, err := dst.Client.Fetch(context.Background(), "orders", p, 0, 1000)
		require.NoError(t, err)
		require.Len(t, got, len(want), "partition %d", p)
		for i, w := range want {
			g := got[i]
			require.Equal(t, w.Offset, g.Offset)
			require.Equal(t, w.Key, g.Key)
			require.Equal(t, w.Value, g.Value)
			require.True(t, w.Timestamp.Equal(g.Timestamp), "partition %d offset %d: %s, mirrored %s", p, w.Offset, w.Timestamp, g.Timestamp)
			wantH := map[string][]byte{"pgmsg-offset": []byte(strconvI(w.Offset))}
			for k, v := range w.Headers {
				wantH[k] = v
			}
			require.Equal(t, wantH, g.Headers, "partition %d offset %d", p, w.Offset)
		}
	}
}

func strconvI(n int64) string { return strconv.FormatInt(n, 10) }
