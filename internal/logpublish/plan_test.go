package logpublish

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// The checks that need no round trip: an empty call, the partition
// choice and a Producer record's bounds.
func TestPlanEmpty(t *testing.T) {
	p := New(nil, nil, Config{})
	_, err := p.Plan(context.Background(), nil, nil, false, Idempotence{})
	if !errors.Is(err, errs.EmptyBatch) {
		t.Fatalf("Plan(no records) = %v, want EmptyBatch", err)
	}
}

func TestChoosePartition(t *testing.T) {
	p := New(nil, nil, Config{})
	never := func() int32 { t.Fatal("spread called for a keyed or manual record"); return 0 }
	got, err := p.Partition(&pgmsgtype.Record{Topic: "t", Partition: 2}, 3, true, never)
	if err != nil || got != 2 {
		t.Fatalf("manual partition 2 of 3 = %d, %v", got, err)
	}
	for _, part := range []int32{-1, 3} {
		if _, err := p.Partition(&pgmsgtype.Record{Topic: "t", Partition: part}, 3, true, never); !errors.Is(err, errs.PartitionOutOfRange) {
			t.Fatalf("manual partition %d of 3: %v, want PartitionOutOfRange", part, err)
		}
	}
	key := []byte("customer-7")
	if got, err := p.Partition(&pgmsgtype.Record{Topic: "t", Key: key}, 8, false, never); err != nil || got != PartitionForKey(key, 8) {
		t.Fatalf("keyed = %d, %v, want %d", got, err, PartitionForKey(key, 8))
	}
	if got, _ := p.Partition(&pgmsgtype.Record{Topic: "t"}, 8, false, func() int32 { return 5 }); got != 5 {
		t.Fatalf("unkeyed = %d, want the spread's 5", got)
	}
}

// An idempotent call's unkeyed records land on the same partition on
// every retry: the spread depends on the producer id and sequence only.
func TestIdempotenceSpreadIsStable(t *testing.T) {
	a := Idempotence{ProducerID: "p-1", Sequence: 42}
	for range 10 {
		if a.spread(16) != (Idempotence{ProducerID: "p-1", Sequence: 42}).spread(16) {
			t.Fatal("spread differs between calls")
		}
	}
	seen := map[int32]bool{}
	for seq := range int64(64) {
		s := Idempotence{ProducerID: "p-1", Sequence: seq}.spread(4)
		if s < 0 || s >= 4 {
			t.Fatalf("spread %d outside 4 partitions", s)
		}
		seen[s] = true
	}
	if len(seen) < 2 {
		t.Fatalf("64 sequences all spread to %v", seen)
	}
}

func TestCheckRecord(t *testing.T) {
	bad := errors.New("bad time")
	p := New(nil, nil, Config{CheckTime: func(what string, tm time.Time) error {
		if what != "record timestamp" {
			t.Fatalf("CheckTime(%q)", what)
		}
		if tm.Year() > 9999 {
			return bad
		}
		return nil
	}})
	meta := TopicMeta{Partitions: 1, MaxRecordBytes: 4}
	if err := p.CheckRecord(&pgmsgtype.Record{Topic: "t", Key: []byte("ab"), Value: []byte("cd")}, meta); err != nil {
		t.Fatalf("4 bytes of 4: %v", err)
	}
	if err := p.CheckRecord(&pgmsgtype.Record{Topic: "t", Key: []byte("ab"), Value: []byte("cde")}, meta); !errors.Is(err, errs.RecordTooLarge) {
		t.Fatalf("5 bytes of 4: %v, want RecordTooLarge", err)
	}
	future := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := p.CheckRecord(&pgmsgtype.Record{Topic: "t", Timestamp: future}, meta); !errors.Is(err, bad) {
		t.Fatalf("year 10000: %v, want CheckTime's error", err)
	}
}

// Close before any publish has nothing to stop, and may be called twice.
func TestCloseUnstarted(t *testing.T) {
	p := New(nil, nil, Config{})
	p.Close()
	p.Close()
}
