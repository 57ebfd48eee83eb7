package pgmsg

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/store"
)

// totalsFullEvery is how often LogTotals reads every topic's and group's
// totals again even when no row says it changed: what the changed rows
// cannot show (a record deleted under a group's cursor by compaction moves
// its oldest unconsumed record) is at most this old.
const totalsFullEvery = 5 * time.Minute

// totalsCache is LogTotals's last answer, kept per client and brought up
// to date from the rows written since (store.LogTotalsChanges), so that a
// scrape or a dashboard refresh of an estate in which little changed costs
// a scan of four small tables instead of their joins and aggregates.
type totalsCache struct {
	mu     sync.Mutex
	valid  bool
	xmin   uint64    // the snapshot xmin of the last read
	snap   string    // the last read's snapshot (pg_current_snapshot())
	fullAt time.Time // the last full read
	topics map[int32]store.TopicTotalsRow
	groups map[totalsGroupKey]store.GroupTotals
	// byTopic lists each topic's groups (to drop them when the topic
	// changes).
	byTopic map[int32]map[string]struct{}
	// The answer in order, rebuilt when something changed.
	sortedT []TopicTotals
	sortedG []GroupTotals
	sorted  bool
	// reads counts the reads by kind (tests).
	fullReads, partReads, sameReads int
}

type totalsGroupKey struct {
	topic int32
	group string
}

func (tc *totalsCache) reset() {
	tc.valid, tc.sorted = false, false
	tc.topics = map[int32]store.TopicTotalsRow{}
	tc.groups = map[totalsGroupKey]store.GroupTotals{}
	tc.byTopic = map[int32]map[string]struct{}{}
}

func (tc *totalsCache) putTopic(r store.TopicTotalsRow) { tc.topics[r.TopicID] = r }

func (tc *totalsCache) putGroup(r store.GroupTotalsRow) {
	tc.groups[totalsGroupKey{r.TopicID, r.Group}] = r.GroupTotals
	m := tc.byTopic[r.TopicID]
	if m == nil {
		m = map[string]struct{}{}
		tc.byTopic[r.TopicID] = m
	}
	m[r.Group] = struct{}{}
}

func (tc *totalsCache) dropGroup(k totalsGroupKey) {
	delete(tc.groups, k)
	if m := tc.byTopic[k.topic]; m != nil {
		delete(m, k.group)
		if len(m) == 0 {
			delete(tc.byTopic, k.topic)
		}
	}
}

// counts are the rows the cached totals stand for: topic_partition,
// segment and group_cursor rows.
func (tc *totalsCache) counts() (parts, segs, cursors int64) {
	for _, t := range tc.topics {
		parts += int64(t.Partitions)
		segs += int64(t.Segments)
	}
	for _, g := range tc.groups {
		cursors += int64(g.Partitions)
	}
	return parts, segs, cursors
}

// update brings the cache up to date in exec's snapshot: a full read when
// it has none, when its last full read is older than totalsFullEvery, when
// its xmin is too far behind for 32-bit transaction ids, when most topics
// changed, or when the row counts show a deletion the changed rows do not
// account for; else a read of the changed topics and groups only.
func (c *Client) updateTotals(ctx context.Context, exec DBTX, tc *totalsCache) error {
	// The same snapshot as the last read's (no transaction has begun
	// writing, committed or aborted since): every row reads the same, the
	// answer is the cached one. An idle estate's scrapes stop here.
	var snap string
	if err := c.store.DB(exec).QueryRow(ctx, "SELECT pg_catalog.pg_current_snapshot()::text").Scan(&snap); err != nil {
		return err
	}
	if tc.valid && snap == tc.snap && time.Since(tc.fullAt) < totalsFullEvery {
		tc.sameReads++
		return nil
	}
	ch, err := c.store.LogTotalsChanges(ctx, exec, tc.xmin)
	if err != nil {
		return err
	}
	full := !tc.valid || time.Since(tc.fullAt) >= totalsFullEvery || ch.Xmin < tc.xmin || ch.Xmin-tc.xmin > 1<<30
	if !full {
		topics := map[int32]struct{}{}
		for _, id := range ch.Topics {
			topics[id] = struct{}{}
		}
		groups := map[totalsGroupKey]struct{}{}
		for i, id := range ch.GroupTopics {
			if _, ok := topics[id]; !ok {
				groups[totalsGroupKey{id, ch.GroupNames[i]}] = struct{}{}
			}
		}
		if len(topics)+len(groups) > (len(tc.topics)+len(tc.groups))/2+16 {
			full = true
		} else if len(topics)+len(groups) > 0 {
			ids := make([]int32, 0, len(topics))
			for id := range topics {
				ids = append(ids, id)
			}
			gt := make([]int32, 0, len(groups))
			gn := make([]string, 0, len(groups))
			for k := range groups {
				gt, gn = append(gt, k.topic), append(gn, k.group)
			}
			ts, gs, err := c.store.LogTotalsByID(ctx, exec, false, ids, gt, gn)
			if err != nil {
				return err
			}
			for _, id := range ids {
				delete(tc.topics, id)
				for g := range tc.byTopic[id] {
					tc.dropGroup(totalsGroupKey{id, g})
				}
			}
			for k := range groups {
				tc.dropGroup(k)
			}
			for _, r := range ts {
				tc.putTopic(r)
			}
			for _, r := range gs {
				tc.putGroup(r)
			}
			tc.sorted = false
			tc.partReads++
		}
		if !full {
			// A deleted row (a topic, a group, a segment dropped by
			// retention) is not a written row: the counts show it.
			p, s, g := tc.counts()
			full = p != ch.PartitionRows || s != ch.SegmentRows || g != ch.CursorRows
		}
	}
	if full {
		ts, gs, err := c.store.LogTotalsByID(ctx, exec, true, nil, nil, nil)
		if err != nil {
			return err
		}
		tc.reset()
		for _, r := range ts {
			tc.putTopic(r)
		}
		for _, r := range gs {
			tc.putGroup(r)
		}
		tc.fullAt = time.Now()
		tc.fullReads++
	}
	tc.xmin, tc.snap, tc.valid = ch.Xmin, snap, true
	return nil
}

// answer returns copies of the cached totals in LogTotals's order.
func (tc *totalsCache) answer() ([]TopicTotals, []GroupTotals) {
	if !tc.sorted {
		tc.sortedT = tc.sortedT[:0]
		for _, t := range tc.topics {
			tc.sortedT = append(tc.sortedT, TopicTotals{Topic: t.Topic, Partitions: t.Partitions, StartOffset: t.StartOffset,
				EndOffset: t.EndOffset, Segments: int(t.Segments)})
		}
		slices.SortFunc(tc.sortedT, func(a, b TopicTotals) int { return strings.Compare(a.Topic, b.Topic) })
		tc.sortedG = tc.sortedG[:0]
		for _, g := range tc.groups {
			tc.sortedG = append(tc.sortedG, GroupTotals(g))
		}
		slices.SortFunc(tc.sortedG, func(a, b GroupTotals) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return strings.Compare(a.Group, b.Group)
		})
		tc.sorted = true
	}
	return slices.Clone(tc.sortedT), slices.Clone(tc.sortedG)
}
