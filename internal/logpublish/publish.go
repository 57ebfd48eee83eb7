package logpublish

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Publish is one call of pgmsg.Client.Publish or PublishIdempotent:
// records planned (Plan; a plan that fails makes no span) and sent on the
// pool (Send) inside the call's "publish" span, which puts its trace
// context in the records' headers. duplicate is an idempotent call's
// answer that the records were stored already.
func (p *Publisher) Publish(ctx context.Context, records []*pgmsgtype.Record, manual bool, idem Idempotence) (duplicate bool, err error) {
	batches, err := p.Plan(ctx, p.pool, records, manual, idem)
	if err != nil {
		return false, err
	}
	end := p.cfg.Tracer.StartPublish(ctx, batches[0].Topic, records)
	defer func() { end(err) }()
	if err := p.Send(ctx, batches); err != nil {
		return false, err
	}
	return batches[0].Duplicate, nil
}

// PublishTx is pgmsg.Client.PublishTx: records planned and sent inside
// the caller's transaction tx (SendTx), in the call's "publish" span.
func (p *Publisher) PublishTx(ctx context.Context, tx pgx.Tx, records []*pgmsgtype.Record, manual bool) (err error) {
	batches, err := p.Plan(ctx, tx, records, manual, Idempotence{})
	if err != nil {
		return err
	}
	end := p.cfg.Tracer.StartPublish(ctx, batches[0].Topic, records)
	defer func() { end(err) }()
	return p.SendTx(ctx, tx, batches)
}
