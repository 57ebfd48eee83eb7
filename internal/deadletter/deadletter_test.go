package deadletter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgmsg/pgmsg/pgmsgtype"
)

func TestTopic(t *testing.T) {
	if got := Topic("", "orders"); got != "orders.dlq" {
		t.Fatalf("default: %q", got)
	}
	if got := Topic("poison", "orders"); got != "poison" {
		t.Fatalf("named: %q", got)
	}
}

// A dead letter keeps the source record's key, value, timestamp and own
// headers, drops stale dead-letter and replay headers, and reads back as
// where it came from; its replay drops the dead-letter headers and names
// the group.
func TestRecordOfReplay(t *testing.T) {
	ts := time.Unix(1700000000, 0)
	src := &pgmsgtype.Record{Topic: "orders", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("v"),
		Timestamp: ts, Headers: map[string][]byte{"own": []byte("1"), HeaderError: []byte("old"), ReplayHeaderGroup: []byte("g")}}
	cl := &pgmsgtype.Claim{Topic: "orders", Group: "g", Partition: 3, Records: []*pgmsgtype.Record{src}}
	d := Record(Letter{Rec: src, Err: errors.New("boom"), Deliveries: 5}, cl, "g", "orders.dlq", 1)
	if d.Topic != "orders.dlq" || d.Partition != 1 || string(d.Key) != "k" || string(d.Value) != "v" || !d.Timestamp.Equal(ts) {
		t.Fatalf("dead letter %+v", d)
	}
	if _, ok := d.Headers[ReplayHeaderGroup]; ok || string(d.Headers["own"]) != "1" || string(d.Headers[HeaderError]) != "boom" {
		t.Fatalf("headers %q", d.Headers)
	}
	s, ok := Of(d, "orders", "g")
	if !ok || s != (Source{Partition: 3, Offset: 42, Error: "boom", Deliveries: 5}) {
		t.Fatalf("Of: %+v %v", s, ok)
	}
	if _, ok := Of(d, "orders", "other"); ok {
		t.Fatal("another group's dead letter read as ours")
	}
	r := ReplayRecord(d, "orders", s.Partition, "g")
	if r.Topic != "orders" || r.Partition != 3 || string(r.Headers[ReplayHeaderGroup]) != "g" || string(r.Headers["own"]) != "1" {
		t.Fatalf("replay %+v", r)
	}
	for k := range r.Headers {
		if strings.HasPrefix(k, headerPrefix) {
			t.Fatalf("replay keeps %s", k)
		}
	}
}

func TestForGroup(t *testing.T) {
	rec := func(g string) *pgmsgtype.Record {
		if g == "" {
			return &pgmsgtype.Record{}
		}
		return &pgmsgtype.Record{Headers: map[string][]byte{ReplayHeaderGroup: []byte(g)}}
	}
	mine, other, plain := rec("g"), rec("h"), rec("")
	cl := &pgmsgtype.Claim{Records: []*pgmsgtype.Record{plain, mine}}
	if ForGroup(cl, "g") != cl {
		t.Fatal("a claim with nothing to skip is not returned as is")
	}
	cl = &pgmsgtype.Claim{Records: []*pgmsgtype.Record{plain, other, mine}}
	got := ForGroup(cl, "g")
	if got == cl || len(got.Records) != 2 || got.Records[0] != plain || got.Records[1] != mine || len(cl.Records) != 3 {
		t.Fatalf("skip: %+v", got)
	}
	if ForGroup(&pgmsgtype.Claim{Records: []*pgmsgtype.Record{other}}, "g") != nil {
		t.Fatal("a claim of other groups' replays only is not nil")
	}
}

func TestTruncateUTF8(t *testing.T) {
	if got := TruncateUTF8("héllo", 2); got != "h" {
		t.Fatalf("%q", got)
	}
	if got := TruncateUTF8("abc", 5); got != "abc" {
		t.Fatalf("%q", got)
	}
	if ErrorText(nil) != "" {
		t.Fatal("nil error has text")
	}
}
