package logconsumer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/deadletter"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Poison records: a record the handler keeps failing on is handed over
// again with a growing backoff and, with Config.MaxDeliveries, set aside
// in a dead-letter topic so that its partition moves on. Everything here
// runs only after a handler failed; Run's path for records handled at the
// first try only checks their headers for the replay header
// (deadletter.ForGroup).

// redeliver handles the records of claim cl that the handler failed on
// (mine: cl without records replayed for other groups; herr: the
// failure), as Config.MaxDeliveries says. It returns the claim for Run to
// commit, or nil when there is nothing to commit: the claim was committed
// along with its dead letters, given back because ctx ended, or lost to
// another member (which delivers its records again).
func (cn *Consumer) redeliver(ctx context.Context, cl, mine *pgmsgtype.Claim, handler Handler, herr error) (*pgmsgtype.Claim, error) {
	if ctx.Err() != nil {
		return nil, cn.release(ctx, cl)
	}
	maxDeliveries := cn.cfg.MaxDeliveries
	if maxDeliveries == 0 && cn.readsSeveral(cl.Topic) {
		// Retrying in place would hold up the member's other partitions
		// for as long as the records keep failing: give the claim back at
		// once; the claim order (least recently claimed first) hands the
		// others out before this one comes back.
		return nil, cn.release(ctx, cl)
	}
	var dead []deadletter.Letter
	if maxDeliveries == 0 || len(mine.Records) == 1 {
		// The whole claim again, until it succeeds or (one record) until
		// it has had its deliveries.
		for deliveries := 1; ; deliveries++ {
			if maxDeliveries > 0 && deliveries >= maxDeliveries {
				dead = append(dead, deadletter.Letter{Rec: mine.Records[0], Err: herr, Deliveries: deliveries})
				break
			}
			if keep, err := cn.backoff(ctx, cl, deliveries); !keep {
				return nil, err
			}
			if herr = cn.handle(ctx, mine, handler); herr == nil {
				return cl, nil
			}
		}
	} else {
		// Several records: one at a time, so that only the records that
		// fail on their own are set aside.
		for _, r := range mine.Records {
			one := *mine
			one.Records = []*pgmsgtype.Record{r}
			for deliveries := 0; ; deliveries++ {
				if deliveries > 0 {
					if deliveries >= maxDeliveries {
						dead = append(dead, deadletter.Letter{Rec: r, Err: herr, Deliveries: deliveries})
						break
					}
					if keep, err := cn.backoff(ctx, cl, deliveries); !keep {
						return nil, err
					}
				}
				if herr = cn.handle(ctx, &one, handler); herr == nil {
					break
				}
				if ctx.Err() != nil {
					return nil, cn.release(ctx, cl)
				}
			}
		}
	}
	if len(dead) == 0 {
		return cl, nil
	}
	return nil, cn.setAside(ctx, cl, dead)
}

// backoff waits before delivery n+1 of a claim's records, with the claim's
// lease extended over the wait. It reports false (and what Run should
// return) when the records must not be handed over again here: ctx ended
// or the group is moving the partition to another member (the claim is
// given back: a hand-over waits for it), or the claim was lost.
func (cn *Consumer) backoff(ctx context.Context, cl *pgmsgtype.Claim, n int) (bool, error) {
	if ctx.Err() != nil || !cn.stillOwns(cl) {
		return false, cn.release(ctx, cl)
	}
	wait := cn.cfg.RedeliveryBackoff
	for i := 1; i < n && wait < cn.cfg.RedeliveryBackoffMax; i++ {
		wait *= 2 // both are at most LeaseMax (366 days): no overflow
	}
	wait = min(wait, cn.cfg.RedeliveryBackoffMax)
	if err := cn.log.Extend(ctx, cl, min(cn.cfg.Lease+wait, cn.cfg.LeaseMax)); err != nil {
		if errs.IsLostClaim(err) {
			return false, nil
		}
		if ctx.Err() != nil {
			return false, cn.release(ctx, cl)
		}
		return false, err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, cn.release(ctx, cl)
	case <-t.C:
	}
	if !cn.stillOwns(cl) {
		return false, cn.release(ctx, cl)
	}
	return true, nil
}

// readsSeveral reports whether the consumer reads more than one partition
// (of topic, or several topics).
func (cn *Consumer) readsSeveral(topic string) bool {
	if len(cn.cfg.Topics) > 1 {
		return true
	}
	if cn.manual() {
		return len(cn.cfg.Partitions) > 1
	}
	n, _ := cn.member.Count(topic)
	return n > 1
}

// stillOwns reports whether the membership still gives cl's partition to
// this member (always, for a consumer of fixed partitions).
func (cn *Consumer) stillOwns(cl *pgmsgtype.Claim) bool {
	if cn.manual() {
		return true
	}
	return cn.member.Owns(cl.Topic, cl.Partition)
}

// setAside publishes dead to the claim's dead-letter topic and commits the
// claim, in one transaction: each record is set aside once, and the
// partition moves on. A claim lost meanwhile writes nothing.
func (cn *Consumer) setAside(ctx context.Context, cl *pgmsgtype.Claim, dead []deadletter.Letter) error {
	ctx = context.WithoutCancel(ctx)
	dlq := deadletter.Topic(cn.cfg.DeadLetterTopic, cl.Topic)
	partitions, err := cn.log.DeadLetterPartitions(ctx, dlq, cl.Topic)
	if err != nil {
		return err
	}
	recs := make([]*pgmsgtype.Record, len(dead))
	offsets := make([]int64, len(dead))
	for i, d := range dead {
		recs[i] = deadletter.Record(d, cl, cn.cfg.Group, dlq, cl.Partition%int32(partitions))
		offsets[i] = d.Rec.Offset
	}
	err = cn.log.BeginFunc(ctx, func(tx pgx.Tx) error {
		if err := cn.log.PublishTx(ctx, tx, recs); err != nil {
			return fmt.Errorf("pgmsg: setting records of %s partition %d aside in %s: %w", cl.Topic, cl.Partition, dlq, err)
		}
		return cn.log.CommitTx(ctx, tx, cl)
	})
	if errs.IsLostClaim(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cn.cfg.Logger.Warn("pgmsg: records set aside in the dead-letter topic after failing every delivery",
		"topic", cl.Topic, "partition", cl.Partition, "offsets", offsets, "group", cn.cfg.Group,
		"dead_letter_topic", dlq, "error", deadletter.ErrorText(dead[len(dead)-1].Err))
	return nil
}
