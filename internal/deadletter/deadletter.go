// Package deadletter owns the format of pgmsg's dead letters: the name of
// a topic's dead-letter topic, the pgmsg.dlq.* headers that say where a
// record set aside came from and why, the reading of those headers back
// (listing), the record a replay publishes with its pgmsg.replay.group
// header, and the rule that a consumer skips records replayed for other
// groups.
//
// It is the one home of that format because two sides use it: the
// Consumer's engine (internal/logconsumer) writes dead letters and skips
// replays, and the root's Client lists and replays them
// (Client.DeadLetters, Client.ReplayDeadLetters). The format makes no
// round trip; List and Replay run on an Admin, which DB implements on the
// store and the claim and publish engines. It knows neither the Client
// nor the Consumer: when to set a record aside (MaxDeliveries, backoff)
// is internal/logconsumer's. The root keeps the
// public names of the headers and suffixes (pgmsg.DeadLetterHeaderTopic
// ...), which must spell the same strings as the constants here (a root
// test checks it).
package deadletter

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Headers of a dead letter (pgmsg.DeadLetterHeaderTopic ...) and of a
// replayed record (pgmsg.ReplayHeaderGroup).
const (
	HeaderTopic       = "pgmsg.dlq.topic"
	HeaderPartition   = "pgmsg.dlq.partition"
	HeaderOffset      = "pgmsg.dlq.offset"
	HeaderGroup       = "pgmsg.dlq.group"
	HeaderError       = "pgmsg.dlq.error"
	HeaderDeliveries  = "pgmsg.dlq.deliveries"
	ReplayHeaderGroup = "pgmsg.replay.group"
	// headerPrefix is the prefix of every dead-letter header: a record's
	// own headers that start with it are dropped when it is set aside or
	// replayed, so that a dead letter's headers always describe its last
	// failure.
	headerPrefix = "pgmsg.dlq."
)

const (
	// Suffix makes the default dead-letter topic's name
	// (pgmsg.DeadLetterSuffix).
	Suffix = ".dlq"
	// ReplayGroupSuffix names the group, on the dead-letter topic, whose
	// cursor remembers what has been replayed for a group
	// (pgmsg.ReplayGroupSuffix).
	ReplayGroupSuffix = ".replay"
	// ErrorMax bounds the handler error kept in a dead letter.
	ErrorMax = 4096
	// HeadersRoom is what a dead-letter topic allows per record beyond its
	// source topic: the pgmsg.dlq.* headers, base64 in jsonb.
	HeadersRoom = 16 << 10
)

// Topic is the dead-letter topic of topic: name, or topic's default.
func Topic(name, topic string) string {
	if name != "" {
		return name
	}
	return topic + Suffix
}

// Letter is a record to set aside and why.
type Letter struct {
	Rec        *pgmsgtype.Record
	Err        error
	Deliveries int
}

// Record is the dead letter of l, a record of cl that group's handler
// failed on, for partition partition of dlq: l's key, value, timestamp
// and own headers (less any pgmsg.dlq.* and replay header), plus the
// pgmsg.dlq.* headers.
func Record(l Letter, cl *pgmsgtype.Claim, group, dlq string, partition int32) *pgmsgtype.Record {
	h := map[string][]byte{}
	for k, v := range l.Rec.Headers {
		if k != ReplayHeaderGroup && !strings.HasPrefix(k, headerPrefix) {
			h[k] = v
		}
	}
	h[HeaderTopic] = []byte(cl.Topic)
	h[HeaderPartition] = []byte(strconv.Itoa(int(cl.Partition)))
	h[HeaderOffset] = []byte(strconv.FormatInt(l.Rec.Offset, 10))
	h[HeaderGroup] = []byte(group)
	h[HeaderError] = []byte(TruncateUTF8(ErrorText(l.Err), ErrorMax))
	h[HeaderDeliveries] = []byte(strconv.Itoa(l.Deliveries))
	return &pgmsgtype.Record{Topic: dlq, Partition: partition, Key: l.Rec.Key, Value: l.Rec.Value,
		Headers: h, Timestamp: l.Rec.Timestamp}
}

// Source is what a dead letter's headers say of its source record.
type Source struct {
	Partition  int32
	Offset     int64
	Error      string
	Deliveries int
}

// Of reads the headers of r, a record of a dead-letter topic; ok is false
// when it is not one of group's dead letters of topic.
func Of(r *pgmsgtype.Record, topic, group string) (s Source, ok bool) {
	if string(r.Headers[HeaderGroup]) != group || string(r.Headers[HeaderTopic]) != topic {
		return Source{}, false
	}
	p, err1 := strconv.ParseInt(string(r.Headers[HeaderPartition]), 10, 32)
	off, err2 := strconv.ParseInt(string(r.Headers[HeaderOffset]), 10, 64)
	n, err3 := strconv.Atoi(string(r.Headers[HeaderDeliveries]))
	if err1 != nil || err2 != nil || err3 != nil {
		return Source{}, false
	}
	return Source{Partition: int32(p), Offset: off, Error: string(r.Headers[HeaderError]), Deliveries: n}, true
}

// ReplayRecord is the record that replays dead letter r (of group, from
// partition of topic) to its source: r's key, value, timestamp and own
// headers, and ReplayHeaderGroup naming group.
func ReplayRecord(r *pgmsgtype.Record, topic string, partition int32, group string) *pgmsgtype.Record {
	h := map[string][]byte{ReplayHeaderGroup: []byte(group)}
	for k, v := range r.Headers {
		if !strings.HasPrefix(k, headerPrefix) {
			h[k] = v
		}
	}
	return &pgmsgtype.Record{Topic: topic, Partition: partition, Key: r.Key, Value: r.Value,
		Headers: h, Timestamp: r.Timestamp}
}

// ForGroup returns cl, or a copy without the records replayed for groups
// other than group (ReplayHeaderGroup), or nil when none is left. The
// claim to commit is always cl: it covers the records skipped. A claim
// with no replayed record (the common case) costs no allocation.
func ForGroup(cl *pgmsgtype.Claim, group string) *pgmsgtype.Claim {
	var keep []*pgmsgtype.Record
	skipped := false
	for i, r := range cl.Records {
		if g, ok := r.Headers[ReplayHeaderGroup]; ok && string(g) != group {
			if !skipped {
				keep = append([]*pgmsgtype.Record(nil), cl.Records[:i]...)
				skipped = true
			}
			continue
		}
		if skipped {
			keep = append(keep, r)
		}
	}
	switch {
	case !skipped:
		return cl
	case len(keep) == 0:
		return nil
	}
	cp := *cl
	cp.Records = keep
	return &cp
}

// ErrorText is err's text, "" for nil.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TruncateUTF8 cuts s to at most n bytes without splitting a character.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
