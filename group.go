package pgmsg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/store"
)

// GroupPartition is one partition's state in a consumer group.
type GroupPartition struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Partition int32  `json:"partition"`
	// NextOffset is the group's cursor: the next offset it will read.
	NextOffset int64 `json:"next_offset"`
	// EndOffset is the partition's next offset to be written.
	EndOffset int64 `json:"end_offset"`
	// Lag is EndOffset - NextOffset.
	Lag        int64 `json:"lag"`
	ClaimEpoch int64 `json:"claim_epoch"`
	// ClaimOwner and ClaimExpiresAt are set while a live claim exists.
	ClaimOwner     string     `json:"claim_owner,omitempty"`
	ClaimExpiresAt *time.Time `json:"claim_expires_at,omitempty"`
	CommittedAt    *time.Time `json:"committed_at,omitempty"`
	// Owner is the member the partition is assigned to ("" when unassigned
	// or when the group is read without membership); OwnerEpoch is the
	// assignment's generation.
	Owner      string `json:"owner,omitempty"`
	OwnerEpoch int64  `json:"owner_epoch"`
	// Skipped counts records this group never read because retention's
	// hard limit dropped them first.
	Skipped int64 `json:"skipped"`
}

// GroupMember is a member of a consumer group (see Consumer).
type GroupMember struct {
	MemberID       string        `json:"member_id"`
	JoinedAt       time.Time     `json:"joined_at"`
	HeartbeatAt    time.Time     `json:"heartbeat_at"`
	SessionTimeout time.Duration `json:"session_timeout"`
	// Alive is false once the session timed out; the next heartbeat of any
	// member removes it.
	Alive      bool    `json:"alive"`
	Partitions []int32 `json:"partitions"`
}

// GroupDescription is a group's members and per-partition state with lag.
type GroupDescription struct {
	Topic      string           `json:"topic"`
	Group      string           `json:"group"`
	Members    []GroupMember    `json:"members"`
	Partitions []GroupPartition `json:"partitions"`
}

// DescribeGroup returns group's members, their partitions and last
// heartbeats, and each partition's cursor, owner and lag. It fails with
// ErrUnknownGroup when the group does not exist on topic.
func (c *Client) DescribeGroup(ctx context.Context, topic, group string) (*GroupDescription, error) {
	d := &GroupDescription{Topic: topic, Group: group}
	err := c.readOnly(ctx, func(exec DBTX) error {
		parts, err := c.listGroups(ctx, exec, topic, group)
		if err != nil {
			return err
		}
		if len(parts) == 0 {
			if _, err := c.topicMeta(ctx, exec, topic, true); err != nil {
				return err
			}
			return newError(ErrUnknownGroup, "unknown group %q on topic %q", group, topic)
		}
		d.Partitions = parts
		members, err := c.store.GroupMembers(ctx, exec, topic, group)
		if err != nil {
			return err
		}
		for _, m := range members {
			d.Members = append(d.Members, GroupMember(m))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// CreateGroup creates group on topic with its cursors at start
// (PositionEarliest, PositionLatest, an offset or an RFC 3339 timestamp).
// It returns false if the group already existed (left unchanged).
func (c *Client) CreateGroup(ctx context.Context, topic, group, start string) (bool, error) {
	// group_create() refuses a bad name (PM003); Go only what cannot be
	// sent.
	if err := sendableNames("topic", topic, "group", group); err != nil {
		return false, err
	}
	if start == "" {
		start = PositionEarliest
	}
	return c.store.GroupCreate(ctx, c.pool, topic, group, start)
}

// ResetGroup moves group's cursor on every partition of topic (or only
// partition, when not nil) to position: PositionEarliest, PositionLatest,
// an offset or an RFC 3339 timestamp. Live claims end, and their commits
// fail with ErrClaimNotHeld. It returns the reset partitions as
// ListGroups shows them, read in the reset's transaction: the new cursor,
// the end offset and the lag from there.
func (c *Client) ResetGroup(ctx context.Context, topic, group, position string, partition *int32) ([]GroupPartition, error) {
	var out []GroupPartition
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		rows, err := c.store.GroupReset(ctx, tx, topic, group, position, partition)
		if err != nil {
			return err
		}
		all, err := c.listGroups(ctx, tx, topic, group)
		if err != nil {
			return err
		}
		byPart := make(map[int32]GroupPartition, len(all))
		for _, gp := range all {
			byPart[gp.Partition] = gp
		}
		out = make([]GroupPartition, len(rows))
		for i, r := range rows {
			gp, ok := byPart[r.Partition]
			if !ok {
				gp = GroupPartition{Topic: topic, Group: group, Partition: r.Partition}
			}
			gp.NextOffset = r.NextOffset
			gp.Lag = max(gp.EndOffset-r.NextOffset, 0)
			out[i] = gp
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteGroup removes group from topic; false if it did not exist.
func (c *Client) DeleteGroup(ctx context.Context, topic, group string) (bool, error) {
	return c.store.GroupDelete(ctx, c.pool, topic, group)
}

// ListGroups returns every group's partitions with lag, optionally only for
// one topic and/or group ("" for all).
func (c *Client) ListGroups(ctx context.Context, topic, group string) ([]GroupPartition, error) {
	return c.listGroups(ctx, c.pool, topic, group)
}

func (c *Client) listGroups(ctx context.Context, exec DBTX, topic, group string) ([]GroupPartition, error) {
	rows, err := c.store.GroupList(ctx, exec, topic, group)
	if err != nil {
		return nil, err
	}
	out := make([]GroupPartition, len(rows))
	for i, r := range rows {
		out[i] = GroupPartition(r)
	}
	return out, nil
}

// GroupSummary is one consumer group's partitions summed: what
// `pgmsg group list` shows for each group.
type GroupSummary struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
	// Partitions is how many partitions the group has a cursor on.
	Partitions int32 `json:"partitions"`
	// NextOffset and EndOffset are the sums of the partitions' cursors and
	// ends; Lag is the sum of their lags (each end - cursor, at least 0).
	NextOffset int64 `json:"next_offset"`
	EndOffset  int64 `json:"end_offset"`
	Lag        int64 `json:"lag"`
	// Claimed counts the partitions with a live claim.
	Claimed int32 `json:"claimed"`
	// CommittedAt is the group's latest commit on any partition.
	CommittedAt *time.Time `json:"committed_at,omitempty"`
	// Skipped sums the records retention's hard limit dropped unread.
	Skipped int64 `json:"skipped"`
}

// ListGroupSummaries returns one row per group with its partitions'
// cursors and lag summed, optionally only for one topic and/or group (""
// for all). Its answer grows with the number of groups, not of their
// partitions; ListGroups has each partition.
func (c *Client) ListGroupSummaries(ctx context.Context, topic, group string) ([]GroupSummary, error) {
	rows, err := c.store.GroupSummary(ctx, c.pool, topic, group)
	if err != nil {
		return nil, err
	}
	out := make([]GroupSummary, len(rows))
	for i, r := range rows {
		out[i] = GroupSummary(r)
	}
	return out, nil
}

// LogEpochEnd returns partition's current log epoch and where its log
// epoch epoch ends (exclusive) on the server (SQL log_epoch_end()): a
// reader that was given offsets of epoch at or past end was given records
// the server lost in a failover, and those offsets now name other records.
// Claims check it by themselves (ErrLogTruncated); a reader that
// remembers offsets elsewhere (a mirror's target, a downstream store)
// checks it with the epoch of the claims it read them from
// (Claim.LogEpoch).
func (c *Client) LogEpochEnd(ctx context.Context, topic string, partition, epoch int32) (current int32, end int64, err error) {
	return c.store.LogEpochEnd(ctx, c.pool, topic, partition, epoch)
}

// Fetch reads up to max records of one partition from offset on, without
// claiming (replay and inspection).
func (c *Client) Fetch(ctx context.Context, topic string, partition int32, from int64, max int) ([]*Record, error) {
	rows, err := c.store.RecordFetch(ctx, c.pool, topic, partition, from, limit32(max))
	if err != nil {
		return nil, err
	}
	out := make([]*Record, len(rows))
	for i, r := range rows {
		h, err := store.DecodeHeaders(r.Headers)
		if err != nil {
			return nil, err
		}
		out[i] = &Record{Topic: topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
			Headers: h, Timestamp: r.Timestamp}
	}
	return out, nil
}

// OffsetForTime returns the first offset of a partition whose record's
// timestamp is at or after t, or the partition's end offset when none is
// (Kafka's ListOffsets by timestamp); Fetch from it to read by time. It
// reads through the time index that maintenance keeps (task
// log.time_index): about TimeIndexStride records, not the partition. It
// fails with ErrUnknownTopic or ErrPartitionOutOfRange.
func (c *Client) OffsetForTime(ctx context.Context, topic string, partition int32, t time.Time) (int64, error) {
	// The SQL function refuses a bad name too (PM003, through _topic());
	// it stays here because the time's check, which must run before the
	// round trip (a time pgx can send and PostgreSQL hold), follows it.
	if err := ValidateName("topic", topic); err != nil {
		return 0, err
	}
	if err := checkTime("time", t); err != nil {
		return 0, err
	}
	return c.store.OffsetForTime(ctx, c.pool, topic, partition, t)
}

// PartitionOffset is an offset of one partition.
type PartitionOffset struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// OffsetsForTime is OffsetForTime for every partition of topic, in
// partition order, in one statement.
func (c *Client) OffsetsForTime(ctx context.Context, topic string, t time.Time) ([]PartitionOffset, error) {
	// The SQL function refuses a bad name too (PM003, through _topic());
	// it stays here because the time's check, which must run before the
	// round trip (a time pgx can send and PostgreSQL hold), follows it.
	if err := ValidateName("topic", topic); err != nil {
		return nil, err
	}
	if err := checkTime("time", t); err != nil {
		return nil, err
	}
	rows, err := c.store.OffsetsForTime(ctx, c.pool, topic, t)
	if err != nil {
		return nil, err
	}
	out := make([]PartitionOffset, len(rows))
	for i, r := range rows {
		out[i] = PartitionOffset(r)
	}
	return out, nil
}

// GroupAssignment is a member's share of a group, as a heartbeat answers
// it.
type GroupAssignment struct {
	Topic  string `json:"topic"`
	Group  string `json:"group"`
	Member string `json:"member"`
	// Joined is true when this heartbeat (re)joined the member: it was new,
	// or its session had expired and its partitions had moved.
	Joined bool `json:"joined"`
	// Partitions are the member's: claims with ClaimOpts.RequireOwner (and
	// the member) take records of these only.
	Partitions []int32 `json:"partitions"`
	// Revoking are partitions the group is handing to another member: the
	// member's live claim on one may still be committed, but no new claim
	// is handed out; the hand-over completes when that claim ends.
	Revoking []int32 `json:"revoking"`
}

// heartbeatCallLinger is how long a Heartbeat call waits for the
// client's other members' heartbeats to go to the database with it: a
// heartbeat is due once an interval (3 s by default) within a session of
// ten, and those of an HTTP server's members arrive spread over it.
const heartbeatCallLinger = 25 * time.Millisecond

// Heartbeat keeps member in group's membership on topic (joining it when
// new, or when its session expired), rebalances the group when members
// came, went or died, and returns the member's partitions. It is what a
// Consumer does every HeartbeatInterval; clients that manage their own
// loop (the HTTP API's members, other languages through group_heartbeat)
// call it at least once per sessionTimeout (0: SessionTimeoutDefault) and
// claim with ClaimOpts{Member: member, RequireOwner: true}. The group is
// created at its earliest records if it does not exist. A call waits up
// to 25 ms for the heartbeats of the client's other members (its
// consumers' too), and those go to the database together: 1,000 members
// heartbeating through one client every 3 s cost PostgreSQL 2.5 % of a
// core where a statement each cost 5.6 % (docs/benchmarks.md).
func (c *Client) Heartbeat(ctx context.Context, topic, group, member string, sessionTimeout time.Duration) (*GroupAssignment, error) {
	// group_heartbeat() refuses bad names (PM003) before anything else;
	// Go only what cannot be sent.
	if err := sendableNames("topic", topic, "group", group, "member", member); err != nil {
		return nil, err
	}
	if sessionTimeout == 0 {
		sessionTimeout = SessionTimeoutDefault
	}
	// It also refuses a session timeout out of range (PM004), before it
	// looks the topic up; one under 1µs is sent as 0.
	row, err := c.heartbeats.HeartbeatWithin(ctx, heartbeatCallLinger, topic, group, member, sessionTimeout, PositionEarliest)
	if err != nil {
		return nil, err
	}
	a := &GroupAssignment{Topic: topic, Group: group, Member: member, Joined: row.Joined,
		Partitions: []int32{}, Revoking: []int32{}}
	for i, p := range row.Partitions {
		if i < len(row.Revoking) && row.Revoking[i] {
			a.Revoking = append(a.Revoking, p)
		} else {
			a.Partitions = append(a.Partitions, p)
		}
	}
	return a, nil
}

// LeaveGroup removes member from group at once: its live claims end
// (their commits are fenced) and its partitions go to the other members
// without waiting for its session to expire. It reports whether member
// was in the group.
func (c *Client) LeaveGroup(ctx context.Context, topic, group, member string) (bool, error) {
	// group_leave() refuses bad names (PM003); Go only what cannot be
	// sent.
	if err := sendableNames("topic", topic, "group", group, "member", member); err != nil {
		return false, err
	}
	return c.store.GroupLeave(ctx, c.pool, topic, group, member)
}
