package producer

import (
	"context"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/internal/telemetry"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// publisherSink is the Sink of a Client's publish engine
// (internal/logpublish): its partition choice and one batch's publish.
type publisherSink struct{ pub *logpublish.Publisher }

func (s publisherSink) Partition(rec *pgmsgtype.Record, partitions int, manual bool, spread Spreader) (int32, error) {
	return s.pub.Partition(rec, partitions, manual, func() int32 {
		return spread.Spread(rec.Topic, partitions)
	})
}

func (s publisherSink) Publish(ctx context.Context, b Batch) error {
	return s.pub.SendOne(ctx, b.Topic, b.Partition, b.Records,
		logpublish.Idempotence{ProducerID: b.ProducerID, Sequence: b.Sequence})
}

// Checks are what Submit checks a record with before queueing it.
type Checks struct {
	// ValidateName is pgmsg.ValidateName (the topic's name is checked
	// before its metadata is looked up).
	ValidateName func(kind, name string) error
	// Tracer opens each record's "publish" span (nil: tracing off).
	Tracer *telemetry.Tracer
}

// OnPublisher returns a Producer that publishes through pub, the
// Client's publish engine on pool, and whose Submit checks records with
// checks.
func OnPublisher(pub *logpublish.Publisher, pool store.DBTX, checks Checks, cfg Config) *Producer {
	p := New(publisherSink{pub}, cfg)
	p.pub, p.pool, p.checks = pub, pool, checks
	return p
}

// Submit is pgmsg.Producer.Produce: inside the record's "publish" span
// (ended when promise is called), rec is checked (its topic's name, its
// topic's metadata, its size and timestamp: logpublish's CheckRecord)
// and queued (Produce). promise may be nil. Only for a Producer made by
// OnPublisher.
func (p *Producer) Submit(ctx context.Context, rec *pgmsgtype.Record, promise func(*pgmsgtype.Record, error)) {
	if promise == nil {
		promise = func(*pgmsgtype.Record, error) {}
	}
	if rec != nil && p.checks.Tracer.On() {
		end := p.checks.Tracer.StartPublish(ctx, rec.Topic, []*pgmsgtype.Record{rec})
		done := promise
		promise = func(r *pgmsgtype.Record, err error) {
			end(err)
			done(r, err)
		}
	}
	if rec == nil {
		promise(rec, errs.New(errs.InvalidArgument, "nil record"))
		return
	}
	if err := p.checks.ValidateName("topic", rec.Topic); err != nil {
		promise(rec, err)
		return
	}
	meta, err := p.pub.TopicMeta(ctx, p.pool, rec.Topic, false)
	if err != nil {
		promise(rec, err)
		return
	}
	if err := p.pub.CheckRecord(rec, meta); err != nil {
		promise(rec, err)
		return
	}
	p.Produce(ctx, rec, meta.Partitions, promise)
}
