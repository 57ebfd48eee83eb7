package kafkasrv_test

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// FuzzRequest sends one request frame (the fuzzed bytes after the size)
// to a listener over a real schema. Whatever the bytes, the server
// answers or closes the connection, and never crashes or hangs. The corpus
// starts with a valid request of every served kind.
//
//	go test -run '^$' -fuzz FuzzRequest -fuzztime 60s ./internal/kafkasrv/
func FuzzRequest(f *testing.F) {
	b := newEnv(f, 8, time.Hour)
	_, err := b.Client.CreateTopic(b.Ctx, "fz", pgmsg.TopicConfig{Partitions: 2, MaxRecordBytes: 1000})
	require.NoError(f, err)
	srv, err := kafkasrv.New(kafkasrv.Config{Client: b.Client, MaxRequestBytes: 1 << 20, MaxFetchWait: 10 * time.Millisecond,
		Advertise: "127.0.0.1:9092"})
	require.NoError(f, err)
	f.Cleanup(func() { _ = srv.Close() })

	rc := &rawConn{}
	for _, req := range seedRequests() {
		fr := rc.frame(req)
		f.Add(fr[4:])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(server)
		}()
		defer func() {
			client.Close()
			<-done
		}()
		require.NoError(t, client.SetDeadline(time.Now().Add(30*time.Second)))
		// The fuzzed request, then an ApiVersions v0 (correlation id
		// -7): an acks=0 produce is answered by nothing, so the server
		// has answered or closed once that one's answer comes, or the
		// connection ends.
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		frame = append(frame, body...)
		frame = append(frame, 0, 0, 0, 10, 0, 18, 0, 0, 0xff, 0xff, 0xff, 0xf9, 0, 0)
		go func() { _, _ = client.Write(frame) }()
		for {
			var size [4]byte
			if _, err := io.ReadFull(client, size[:]); err != nil {
				var ne net.Error
				if errorsAs(err, &ne) {
					require.False(t, ne.Timeout(), "neither answered nor closed")
				}
				return
			}
			resp := make([]byte, binary.BigEndian.Uint32(size[:]))
			_, err := io.ReadFull(client, resp)
			require.NoError(t, err)
			if len(resp) >= 4 && int32(binary.BigEndian.Uint32(resp)) == -7 {
				return
			}
		}
	})
}

// seedRequests is a request of each served kind, valid.
func seedRequests() []kmsg.Request {
	var out []kmsg.Request
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	av.ClientSoftwareName, av.ClientSoftwareVersion = "fuzz", "1"
	out = append(out, av)
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("fz")
	md.Topics = append(md.Topics, mt)
	out = append(out, md)
	out = append(out, produceReq("fz", 0, rawBatch(-1, -1, -1, 1700000000000, rawRecord{key: []byte("k"), value: []byte("v"),
		headers: []kmsg.Header{{Key: "h", Value: []byte("x")}}})))
	out = append(out, produceReq("fz", 1, rawBatch(5, 0, 0, 1700000000000, rawRecord{value: []byte("v")})))
	out = append(out, fetchReq("fz", 0, 0, 1<<20, map[int32]int64{0: 0, 1: 0}, 1<<20))
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 7
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "fz"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = 1700000000000
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	out = append(out, lo)
	fe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	fe.Version, fe.ReplicaID = 4, -1
	ft := kmsg.NewOffsetForLeaderEpochRequestTopic()
	ft.Topic = "fz"
	fp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	fp.CurrentLeaderEpoch, fp.LeaderEpoch = 0, 0
	ft.Partitions = append(ft.Partitions, fp)
	fe.Topics = append(fe.Topics, ft)
	out = append(out, fe)
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 4
	out = append(out, ip)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version = 4
	fc.CoordinatorKeys = []string{"g"}
	out = append(out, fc)
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 7
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "fz2", 1, 1
	ct.Topics = append(ct.Topics, ctt)
	out = append(out, ct)
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Version = 4
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeTopic, "fz"
	dc.Resources = append(dc.Resources, dr)
	out = append(out, dc)
	ia := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ia.Version = 1
	ir := kmsg.NewIncrementalAlterConfigsRequestResource()
	ir.ResourceType, ir.ResourceName = kmsg.ConfigResourceTypeTopic, "fz"
	ir.Configs = append(ir.Configs, kmsg.IncrementalAlterConfigsRequestResourceConfig{Name: "retention.ms", Value: kmsg.StringPtr("1000")})
	ia.Resources = append(ia.Resources, ir)
	out = append(out, ia)
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Version = 3
	cp.Topics = append(cp.Topics, kmsg.CreatePartitionsRequestTopic{Topic: "fz", Count: 3})
	out = append(out, cp)
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version = 6
	dt.Topics = append(dt.Topics, kmsg.DeleteTopicsRequestTopic{Topic: kmsg.StringPtr("fz2")})
	out = append(out, dt)
	lg := kmsg.NewPtrListGroupsRequest()
	lg.Version = 4
	out = append(out, lg)
	return out
}
