package kafkasrv

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/logconsumer"
	"github.com/pgmsg/pgmsg/internal/notifier"
	"github.com/pgmsg/pgmsg/internal/store"
)

// fetchReadMax is the most records one read of a partition asks for.
const fetchReadMax = 2000

// fetch answers a Fetch: each partition's records from its fetch offset
// as v2 record batches, within the partition's and the response's byte
// limits (the first batch of the response goes whatever its size, as
// Kafka does, so a client always progresses). When fewer than MinBytes
// are ready it waits, up to MaxWaitMillis, for pgmsg's notification of a
// publish to one of the topics, then reads again. Fetch sessions are not
// kept: the answer's session id 0 tells the client to send full fetches.
func (s *Server) fetch(ctx context.Context, req *kmsg.FetchRequest, pace *fetchPace) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	if req.Version >= 7 && req.SessionID != 0 {
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp, nil
	}
	// The partitions' own wake-ups, not their topics': a member of a
	// group reads its partitions, and a publish to another partition of
	// the topic would wake it for nothing.
	var keys []string
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			keys = append(keys, notifier.PartitionKey(t.Topic, p.Partition))
		}
	}
	// Subscribe before reading, so that a publish between the read and
	// the wait is not missed.
	var wake <-chan struct{}
	if s.notify != nil {
		ch, stop := s.notify.Subscribe(keys...)
		defer stop()
		wake = ch
	}
	maxWait := min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, s.cfg.MaxFetchWait)
	deadline := time.Now().Add(maxWait)
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	maxBytes := int(req.MaxBytes)
	if req.Version < 3 || maxBytes <= 0 {
		maxBytes = 1<<31 - 1
	}
	// A read that is answered whatever it finds (MaxWait 0, MinBytes 0,
	// or the read after MaxWait) is the Fetch's own: a client that fetches
	// right after a publish was acknowledged gets it. One that waits for
	// a wake-up if it finds too little may share the high watermarks'
	// read (partitions.go): a publish it misses wakes it.
	shared := maxWait > 0 && req.MinBytes > 0
	for {
		resp.Topics = resp.Topics[:0]
		total, records, answerNow, err := s.readFetch(ctx, req, resp, maxBytes, shared)
		if err != nil {
			return nil, err
		}
		if answerNow || total >= int(req.MinBytes) || maxWait <= 0 {
			pace.answered(records, time.Now())
			return resp, nil
		}
		select {
		case <-wake:
			// A publish: wait out the cooldown, if it holds, so that
			// what is published meanwhile goes in this answer.
			if d := pace.cooldown(s.cfg.FetchCooldown, s.cfg.FetchCooldownMinRate, len(keys), time.Now(), deadline); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return nil, ctx.Err()
				}
			}
		case <-timer.C:
			maxWait, shared = 0, false // read once more, then answer
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fetchPace is a connection's Fetch answers as the cooldown needs them:
// when the last went and the records a second they have been carrying
// (measured as the native consumer measures its claims').
type fetchPace struct {
	mu   sync.Mutex
	last time.Time
	rate logconsumer.RateMeter
}

// answered notes an answer of n records at now.
func (p *fetchPace) answered(n int, now time.Time) {
	p.rate.Add(n, now)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = now
}

// cooldown returns how long a Fetch of partitions partitions woken at
// now waits before reading: until cooldown has passed since the previous
// answer, not past deadline, when the answers carry at least minRate
// records a second per partition (Config.FetchCooldownMinRate).
func (p *fetchPace) cooldown(cooldown time.Duration, minRate, partitions int, now, deadline time.Time) time.Duration {
	if cooldown <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.IsZero() || (minRate > 0 && p.rate.Rate() < float64(minRate)*float64(max(partitions, 1))) {
		return 0
	}
	until := p.last.Add(cooldown)
	if until.After(deadline) {
		until = deadline
	}
	return until.Sub(now)
}

// readFetch fills resp with what every partition of req has now. It
// returns the bytes of records answered and whether a partition's error
// must be answered at once.
func (s *Server) readFetch(ctx context.Context, req *kmsg.FetchRequest, resp *kmsg.FetchResponse, maxBytes int, shared bool) (total, records int, answerNow bool, err error) {
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		allowed := true
		if code := s.authorizeCtx(ctx, "topic", rt.Topic, "read"); code != 0 {
			allowed = false
		}
		var parts []store.KafkaPartition
		if allowed {
			if shared {
				parts, err = s.partitions(ctx, rt.Topic)
			} else {
				parts, err = s.partitionsNow(ctx, rt.Topic)
			}
			if err != nil {
				return 0, 0, false, err
			}
			// A shared read may be older than one this client's last
			// answer came from, or its Metadata: a fetch offset past
			// its high watermark, or a leader epoch after its epoch,
			// is judged on a read of its own.
			for _, rp := range rt.Partitions {
				if rp.Partition >= 0 && int(rp.Partition) < len(parts) &&
					(rp.FetchOffset > parts[rp.Partition].NextOffset || rp.CurrentLeaderEpoch > parts[rp.Partition].LogEpoch) {
					if parts, err = s.partitionsNow(ctx, rt.Topic); err != nil {
						return 0, 0, false, err
					}
					break
				}
			}
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			// An empty record set, never a null one, as Kafka sends:
			// librdkafka refuses a null one (MessageSetSize -1).
			sp.RecordBatches = []byte{}
			switch {
			case !allowed:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				answerNow = true
			case rp.Partition < 0 || int(rp.Partition) >= len(parts):
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				answerNow = true
			default:
				p := parts[rp.Partition]
				// The leader epoch first, as a broker checks it: a
				// client fenced by a failover is told so, not that
				// its offset is out of range.
				if sp.ErrorCode = checkLeaderEpoch(rp.CurrentLeaderEpoch, p.LogEpoch); sp.ErrorCode != 0 {
					answerNow = true
					break
				}
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = p.NextOffset, p.NextOffset, p.StartOffset
				if rp.FetchOffset < p.StartOffset || rp.FetchOffset > p.NextOffset {
					sp.ErrorCode = kerr.OffsetOutOfRange.Code
					answerNow = true
					break
				}
				budget := min(int(rp.PartitionMaxBytes), maxBytes-total)
				if rp.FetchOffset < p.NextOffset && (budget > 0 || total == 0) {
					b, n, err := s.readPartition(ctx, rt.Topic, p, rp.FetchOffset, budget, total == 0)
					if err != nil {
						return 0, 0, false, err
					}
					records += n
					if b != nil {
						sp.RecordBatches = b
					}
					total += len(b)
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return total, records, answerNow, nil
}

// readPartition returns record batches of p from offset from, of at most
// budget bytes unless first (then at least one record), and how many
// records they hold. A batch holds records of one log epoch, its
// PartitionLeaderEpoch.
func (s *Server) readPartition(ctx context.Context, topic string, p store.KafkaPartition, from int64, budget int, first bool) ([]byte, int, error) {
	avg := s.avgRecordSize(topic, p.Partition)
	epochs, err := s.epochHistory(ctx, topic, p)
	if err != nil {
		return nil, 0, err
	}
	var out []byte
	count := 0
	for from < p.NextOffset {
		left := budget - len(out)
		if left <= 0 && (!first || len(out) != 0) {
			break
		}
		n := int32(min(max(left/int(avg.Load())+1, 1), fetchReadMax))
		recs, err := s.records(ctx, topic, p, from, n)
		if err != nil {
			return nil, 0, err
		}
		if len(recs) == 0 {
			break // retention dropped them meanwhile
		}
		epoch, next := epochs.epochOf(recs[0].Offset)
		batch := recs
		if next <= recs[len(recs)-1].Offset {
			batch = recs[:searchOffset(recs, next)]
		}
		before := len(out)
		var used int
		out, used = appendBatch(out, batch, epoch, left, first && len(out) == 0)
		if used == 0 {
			break
		}
		count += used
		size := int64((len(out) - before) / used)
		avg.Store((avg.Load()*3 + max(size, 16)) / 4)
		from = recs[used-1].Offset + 1
		if used < len(batch) || int32(len(recs)) < n && used == len(recs) {
			break
		}
	}
	return out, count, nil
}

func (s *Server) avgRecordSize(topic string, partition int32) *atomic.Int64 {
	key := tp{topic, partition}
	if v, ok := s.recordSize.Load(key); ok {
		return v.(*atomic.Int64)
	}
	v := new(atomic.Int64)
	v.Store(1024)
	got, _ := s.recordSize.LoadOrStore(key, v)
	return got.(*atomic.Int64)
}

// varintBytesLen is the encoded length of b as kbin.AppendVarintBytes
// writes it (nil: length -1).
func varintBytesLen(b []byte) int {
	if b == nil {
		return kbin.VarintLen(-1)
	}
	return kbin.VarintLen(int32(len(b))) + len(b)
}

// appendBatch appends one v2 record batch of recs, published in log epoch
// epoch, to dst, as many records as fit in budget bytes of dst (at least
// one when force), and returns how many it took.
func appendBatch(dst []byte, recs []store.KafkaRecord, epoch int32, budget int, force bool) ([]byte, int) {
	start := len(dst)
	firstTS := recs[0].Timestamp.UnixMilli()
	maxTS := firstTS
	// The header, filled in once the records are known. Room for every
	// record, as far as the budget goes, is made once: growing the
	// response record by record copied it over and over (a Fetch's
	// profile had a fifth of its CPU there).
	want := batchHeaderLen
	for _, r := range recs {
		want += len(r.Key) + len(r.Value) + len(r.Headers) + 24
		if want >= budget {
			break
		}
	}
	dst = slices.Grow(dst, want)
	dst = append(dst, make([]byte, batchHeaderLen)...)
	var names []string
	used := 0
	for _, r := range recs {
		ts := r.Timestamp.UnixMilli()
		h, err := store.DecodeHeaders(r.Headers)
		if err != nil {
			h = nil // written by pgmsg, always decodable; a record is never held back for it
		}
		names = names[:0]
		for k := range h {
			names = append(names, k)
		}
		sort.Strings(names)
		// The record's body (attributes, deltas, key, value, headers) is
		// sized first so that it is written once, after its length.
		offDelta := int32(r.Offset - recs[0].Offset)
		body := 1 + kbin.VarlongLen(ts-firstTS) + kbin.VarintLen(offDelta) + varintBytesLen(r.Key) +
			varintBytesLen(r.Value) + kbin.VarintLen(int32(len(names)))
		for _, k := range names {
			body += kbin.VarintLen(int32(len(k))) + len(k) + varintBytesLen(h[k])
		}
		size := kbin.VarintLen(int32(body)) + body
		if len(dst)-start+size > budget && (!force || used != 0) {
			break
		}
		dst = slices.Grow(dst, size)
		dst = kbin.AppendVarint(dst, int32(body))
		dst = append(dst, 0) // attributes
		dst = kbin.AppendVarlong(dst, ts-firstTS)
		dst = kbin.AppendVarint(dst, offDelta)
		dst = kbin.AppendVarintBytes(dst, r.Key)
		dst = kbin.AppendVarintBytes(dst, r.Value)
		dst = kbin.AppendVarint(dst, int32(len(names)))
		for _, k := range names {
			dst = kbin.AppendVarintString(dst, k)
			dst = kbin.AppendVarintBytes(dst, h[k])
		}
		maxTS = max(maxTS, ts)
		used++
	}
	if used == 0 {
		return dst[:start], 0
	}
	rb := kmsg.RecordBatch{
		FirstOffset:          recs[0].Offset,
		PartitionLeaderEpoch: epoch,
		Length:               int32(len(dst) - start - 12),
		Magic:                2,
		LastOffsetDelta:      int32(recs[used-1].Offset - recs[0].Offset),
		FirstTimestamp:       firstTS,
		MaxTimestamp:         maxTS,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(used),
	}
	header := rb.AppendTo(dst[start:start])
	_ = header // written in place over the reserved header bytes
	binary.BigEndian.PutUint32(dst[start+17:], crc32.Checksum(dst[start+21:], castagnoli))
	return dst, used
}
