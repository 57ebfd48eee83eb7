package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// GroupMember is a member of a consumer group (group_members()).
type GroupMember struct {
	MemberID       string
	JoinedAt       time.Time
	HeartbeatAt    time.Time
	SessionTimeout time.Duration
	Alive          bool
	Partitions     []int32
}

// GroupMembers returns the members of group on topic.
func (s *Store) GroupMembers(ctx context.Context, exec DBTX, topic, group string) ([]GroupMember, error) {
	rows, err := s.q.GroupMembers(ctx, s.DB(exec), dbsqlc.GroupMembersParams{Topic: topic, GroupName: group})
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]GroupMember, len(rows))
	for i, r := range rows {
		out[i] = GroupMember{MemberID: r.MemberID, JoinedAt: r.JoinedAt.Time, HeartbeatAt: r.HeartbeatAt.Time,
			SessionTimeout: time.Duration(r.SessionTimeout.Microseconds) * time.Microsecond, Alive: r.Alive,
			Partitions: r.Partitions}
	}
	return out, nil
}

// GroupCreate creates group on topic with its cursors at start; false if
// it existed already.
func (s *Store) GroupCreate(ctx context.Context, exec DBTX, topic, group, start string) (bool, error) {
	created, err := s.q.GroupCreate(ctx, s.DB(exec), dbsqlc.GroupCreateParams{Topic: topic, GroupName: group, Start: start})
	return created, errs.Map(err)
}

// GroupCursor is a partition's cursor after GroupReset.
type GroupCursor struct {
	Partition  int32
	NextOffset int64
}

// GroupReset moves group's cursors on topic (on partition only, when not
// nil) to position, and returns them.
func (s *Store) GroupReset(ctx context.Context, exec DBTX, topic, group, position string, partition *int32) ([]GroupCursor, error) {
	arg := dbsqlc.GroupResetParams{Topic: topic, GroupName: group, ToPosition: position}
	if partition != nil {
		arg.Partition = pgtype.Int4{Int32: *partition, Valid: true}
	}
	rows, err := s.q.GroupReset(ctx, s.DB(exec), arg)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]GroupCursor, len(rows))
	for i, r := range rows {
		out[i] = GroupCursor{Partition: r.Partition, NextOffset: r.NextOffset}
	}
	return out, nil
}

// GroupDelete removes group from topic; false if it did not exist.
func (s *Store) GroupDelete(ctx context.Context, exec DBTX, topic, group string) (bool, error) {
	ok, err := s.q.GroupDelete(ctx, s.DB(exec), dbsqlc.GroupDeleteParams{Topic: topic, GroupName: group})
	return ok, errs.Map(err)
}

// GroupPartition is one partition's state in a consumer group
// (group_list()); the root's GroupPartition has the same fields.
type GroupPartition struct {
	Topic          string
	Group          string
	Partition      int32
	NextOffset     int64
	EndOffset      int64
	Lag            int64
	ClaimEpoch     int64
	ClaimOwner     string     // "" when no live claim
	ClaimExpiresAt *time.Time // nil when no live claim
	CommittedAt    *time.Time // nil when never committed
	Owner          string     // "" when unassigned
	OwnerEpoch     int64
	Skipped        int64
}

// GroupList returns every group's partitions, only topic's and/or
// group's when not "".
func (s *Store) GroupList(ctx context.Context, exec DBTX, topic, group string) ([]GroupPartition, error) {
	arg := dbsqlc.GroupListParams{}
	if topic != "" {
		arg.Topic = pgtype.Text{String: topic, Valid: true}
	}
	if group != "" {
		arg.GroupName = pgtype.Text{String: group, Valid: true}
	}
	rows, err := s.q.GroupList(ctx, s.DB(exec), arg)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]GroupPartition, len(rows))
	for i, r := range rows {
		out[i] = GroupPartition{Topic: r.Topic, Group: r.GroupName, Partition: r.Partition, NextOffset: r.NextOffset,
			EndOffset: r.EndOffset, Lag: r.Lag, ClaimEpoch: r.ClaimEpoch, ClaimOwner: r.ClaimOwner,
			ClaimExpiresAt: timePtr(r.ClaimExpiresAt), CommittedAt: timePtr(r.CommittedAt),
			Owner: r.Owner, OwnerEpoch: r.OwnerEpoch, Skipped: r.Skipped}
	}
	return out, nil
}

// GroupSummary is one group's partitions summed (group_summary()).
type GroupSummary struct {
	Topic, Group          string
	Partitions            int32
	NextOffset, EndOffset int64
	Lag                   int64
	Claimed               int32
	CommittedAt           *time.Time // nil when never committed
	Skipped               int64
}

// GroupSummary returns one row per group, only topic's and/or group's
// when not "".
func (s *Store) GroupSummary(ctx context.Context, exec DBTX, topic, group string) ([]GroupSummary, error) {
	arg := dbsqlc.GroupSummaryParams{}
	if topic != "" {
		arg.Topic = pgtype.Text{String: topic, Valid: true}
	}
	if group != "" {
		arg.GroupName = pgtype.Text{String: group, Valid: true}
	}
	rows, err := s.q.GroupSummary(ctx, s.DB(exec), arg)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]GroupSummary, len(rows))
	for i, r := range rows {
		out[i] = GroupSummary{Topic: r.Topic, Group: r.GroupName, Partitions: r.Partitions, NextOffset: r.NextOffset,
			EndOffset: r.EndOffset, Lag: r.Lag, Claimed: r.Claimed, CommittedAt: timePtr(r.CommittedAt), Skipped: r.Skipped}
	}
	return out, nil
}

// OffsetForTime returns the first offset of a partition whose record's
// timestamp is at or after t, or the partition's end offset.
func (s *Store) OffsetForTime(ctx context.Context, exec DBTX, topic string, partition int32, t time.Time) (int64, error) {
	o, err := s.q.OffsetForTime(ctx, s.DB(exec), dbsqlc.OffsetForTimeParams{Topic: topic, Partition: partition,
		Ts: pgtype.Timestamptz{Time: t, Valid: true}})
	return o, errs.Map(err)
}

// PartitionOffset is an offset of one partition.
type PartitionOffset struct {
	Partition int32
	Offset    int64
}

// OffsetsForTime is OffsetForTime for every partition of topic, in
// partition order.
func (s *Store) OffsetsForTime(ctx context.Context, exec DBTX, topic string, t time.Time) ([]PartitionOffset, error) {
	rows, err := s.q.OffsetsForTime(ctx, s.DB(exec), dbsqlc.OffsetsForTimeParams{Topic: topic,
		Ts: pgtype.Timestamptz{Time: t, Valid: true}})
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]PartitionOffset, len(rows))
	for i, r := range rows {
		out[i] = PartitionOffset{Partition: r.Partition, Offset: r.Offset}
	}
	return out, nil
}

// Heartbeat is what GroupHeartbeat answers: the member's partitions.
type Heartbeat struct {
	// Joined: this heartbeat (re)joined the member.
	Joined bool
	// Partitions are the member's, with their owner epochs; Revoking[i]
	// says Partitions[i] is being handed to another member.
	Partitions  []int32
	OwnerEpochs []int64
	Revoking    []bool
	// Async is "off" when the heartbeat committed asynchronously (the
	// group existed before it), else "".
	Async string
}

// GroupHeartbeat keeps member in group's membership on topic
// (group_heartbeat(); the group is created at start if it does not
// exist) and returns its assignment.
func (s *Store) GroupHeartbeat(ctx context.Context, exec DBTX, topic, group, member string, sessionTimeout time.Duration, start string) (*Heartbeat, error) {
	// The heartbeat of a steady group first, as group_heartbeat() begins:
	// one statement, without the function call. No row: the function.
	call := SteadyHeartbeat{Topic: topic, Group: group, Member: member, SessionTimeout: sessionTimeout}
	hbs, err := s.steadyHeartbeats(ctx, exec, []SteadyHeartbeat{call})
	if err != nil {
		return nil, err
	}
	if hbs[0] != nil {
		return hbs[0], nil
	}
	return s.groupHeartbeat(ctx, exec, topic, group, member, sessionTimeout, start)
}

// groupHeartbeat is GroupHeartbeat through group_heartbeat() alone.
func (s *Store) groupHeartbeat(ctx context.Context, exec DBTX, topic, group, member string, sessionTimeout time.Duration, start string) (*Heartbeat, error) {
	row, err := s.q.GroupHeartbeat(ctx, s.DB(exec), dbsqlc.GroupHeartbeatParams{
		Topic: topic, GroupName: group, Member: member,
		SessionTimeout: interval(sessionTimeout), Start: start,
	})
	if err != nil {
		return nil, errs.Map(err)
	}
	return &Heartbeat{Joined: row.Joined, Partitions: row.Partitions, OwnerEpochs: row.OwnerEpochs,
		Revoking: row.Revoking, Async: row.Async}, nil
}

// SteadyHeartbeat names one member's heartbeat for steadyHeartbeats.
type SteadyHeartbeat struct {
	Topic, Group, Member string
	SessionTimeout       time.Duration
}

// steadyHeartbeats runs the heartbeats of members of steady groups
// (heartbeat_steady) in one statement and answers each member's
// assignment, or nil for a member whose heartbeat must go through
// group_heartbeat() (GroupHeartbeat).
func (s *Store) steadyHeartbeats(ctx context.Context, exec DBTX, calls []SteadyHeartbeat) ([]*Heartbeat, error) {
	topics := make([]string, len(calls))
	groups := make([]string, len(calls))
	members := make([]string, len(calls))
	sessions := make([]pgtype.Interval, len(calls))
	for i, c := range calls {
		topics[i], groups[i], members[i], sessions[i] = c.Topic, c.Group, c.Member, interval(c.SessionTimeout)
	}
	rows, err := s.DB(exec).Query(ctx, heartbeatSteadySQL, topics, groups, members, sessions, len(calls))
	if err != nil {
		return nil, errs.Map(err)
	}
	defer rows.Close()
	out := make([]*Heartbeat, len(calls))
	for rows.Next() {
		var i int64
		hb := &Heartbeat{}
		if err := rows.Scan(&i, &hb.Partitions, &hb.OwnerEpochs, &hb.Revoking, &hb.Async); err != nil {
			return nil, errs.Map(err)
		}
		out[i-1] = hb
	}
	if err := rows.Err(); err != nil {
		return nil, errs.Map(err)
	}
	return out, nil
}

// heartbeatSteadySQL is steady groups' heartbeats (heartbeat_steady),
// committed asynchronously as GroupHeartbeat's query does when the group
// exists (it does: the statement read its row). i numbers the members
// from 1 in the order of the arrays.
//
// LIMIT $5 (the number of members) is for the plan cache: the planner
// takes an array parameter for ten elements and a LIMIT parameter for a
// tenth of its input, so the generic plan is costed for one member, as
// the custom plans of a few are, and kept (without it each call was
// planned again: 0.5 ms of planning for 0.2 ms of execution).
//
// It also keeps the groups steady: when a group's steady_until is within
// a third of a heartbeating member's session timeout (a member heartbeats
// at least three times a session: Kafka's rule for its heartbeat
// interval), _group_steady_extend() moves it on, once per such group,
// after the members' rows are updated (the InitPlan reads all of h first)
// and in snapshots of its own that see them. Past steady_until, the next
// heartbeat of the group would go through group_heartbeat(), which checks
// every member: once a session timeout or so for every group, at ten times
// a steady heartbeat's cost and a second round trip. The call is a
// function, not more of this statement, because this statement is
// initialised at every call and the extension is needed at few.
var heartbeatSteadySQL = `WITH h AS (
    ` + stmt("heartbeat_steady", `(SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
              pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::interval[])) WITH ORDINALITY AS a(topic, grp, member, session, i)
              LIMIT $5) a`) + `
    RETURNING a.i, m.topic_id, m.group_name, k.steady_until < m.heartbeat_at + m.session_timeout / 3 AS near,
              m.partitions, m.owner_epochs, m.revoking
)
SELECT h.i, h.partitions, h.owner_epochs, h.revoking, pg_catalog.set_config('synchronous_commit', 'off', true) FROM h
 WHERE (SELECT pg_catalog.count(*) FILTER (WHERE pgmsg._group_steady_extend(n.topic_id, n.group_name))
          FROM (SELECT DISTINCT h.topic_id, h.group_name FROM h WHERE h.near) n) >= 0`

// GroupLeave removes member from group on topic; false if it was not in
// the group.
func (s *Store) GroupLeave(ctx context.Context, exec DBTX, topic, group, member string) (bool, error) {
	ok, err := s.q.GroupLeave(ctx, s.DB(exec), dbsqlc.GroupLeaveParams{Topic: topic, GroupName: group, Member: member})
	return ok, errs.Map(err)
}
