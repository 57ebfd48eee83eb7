package logread

import (
	"context"
	"sync"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
)

// Log epochs: a partition's log epoch changes when its history may have
// changed (the first publish on a promoted standby's timeline starts a new
// one, _log_epoch_bump in functions/log.sql). Every claim reports the
// partition's epoch; the Reader remembers, per group and partition, the
// epoch of its last claim and the end of the highest range it was given.
// When a claim reports another epoch, the Reader asks where the epoch it
// knew ends on this server (log_epoch_end()): if it had been given offsets
// at or past that end, those offsets now name other records, and the
// claim fails with errs.LogTruncated instead of handing them over (Kafka's
// consumers detect the same with the leader epoch of their position).
// Only what this Reader was given is known: a process that starts after
// the failover has no memory, and follows the group's cursor as stored on
// the new primary.
//
// The Kafka listener (kafkasrv) answers fetches of its own: the log
// epoch is its leader epoch, and Kafka clients make the same check with
// it (internal/kafkasrv/epochs.go).

// epochKey names what a group was given of one partition.
type epochKey struct {
	topic, group string
	partition    int32
}

// seenRange is the epoch of a group's last claim of a partition and the
// end (exclusive) of the highest range it was given in that epoch.
type seenRange struct {
	topicID int32
	epoch   int32
	end     int64
}

// epochMemory is the Reader's seenRanges, and the last epoch it saw of
// each partition (for the record cache, which must not serve records of
// an older epoch).
type epochMemory struct {
	mu    sync.Mutex
	seen  map[epochKey]seenRange
	parts map[partitionKey]int32
}

// partitionEpoch records epoch as the partition's latest and reports
// whether it differs from the one recorded before (false for the first).
func (m *epochMemory) partitionEpoch(pk partitionKey, epoch int32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parts == nil {
		m.parts = map[partitionKey]int32{}
	}
	old, ok := m.parts[pk]
	m.parts[pk] = epoch
	return ok && old != epoch
}

// checkEpoch records the claim row of group's partition and fails with
// errs.LogTruncated when the partition's log epoch changed since the
// group's previous claim through the Reader and the ranges the group was
// given in the old epoch reach past where that epoch ends on the server.
// The caller releases the claim on that error.
func (r *Reader) checkEpoch(ctx context.Context, exec store.DBTX, topic, group string, row *store.ClaimRow) error {
	k := epochKey{topic, group, row.Partition}
	m := &r.epochs
	m.mu.Lock()
	prev, known := m.seen[k]
	if !known || prev.topicID != row.TopicID || prev.epoch == row.LogEpoch {
		if m.seen == nil {
			m.seen = map[epochKey]seenRange{}
		}
		next := seenRange{topicID: row.TopicID, epoch: row.LogEpoch, end: row.LastOffset + 1}
		if known && prev.topicID == row.TopicID {
			next.end = max(next.end, prev.end)
		}
		m.seen[k] = next
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	_, end, err := r.store.LogEpochEnd(ctx, exec, topic, row.Partition, prev.epoch)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.seen[k] = seenRange{topicID: row.TopicID, epoch: row.LogEpoch, end: row.LastOffset + 1}
	m.mu.Unlock()
	if prev.end > end {
		return errs.New(errs.LogTruncated,
			"log truncated by failover: group %q was given offsets %d to %d of topic %q partition %d in log epoch %d, "+
				"which ends at offset %d on this server (now in log epoch %d): those offsets now name other records; "+
				"claim again to go on from the group's cursor (%d), or move it (pgmsg group reset)",
			group, end, prev.end-1, topic, row.Partition, prev.epoch, end, row.LogEpoch, row.FirstOffset)
	}
	return nil
}
