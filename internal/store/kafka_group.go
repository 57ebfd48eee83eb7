package store

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// The Kafka group coordinator's statements (internal/kafkagroup; tables
// of migration 016). A Kafka group's committed offsets are the cursors of
// pgmsg's groups of the same name (group_cursor, one pgmsg group per
// topic); kafka_group and kafka_group_member hold the membership that must
// outlive the coordinating process, kafka_offset what a commit carries
// beside the offset. Written for the default schema and qualified by DB
// like the other direct statements; built-in functions are named
// pg_catalog.

// KafkaGroup is a Kafka group's persisted state (kafka_group).
type KafkaGroup struct {
	Name         string
	ProtocolType string
	Protocol     string
	Generation   int32
	Leader       string
	State        string
	// Version is the row's write counter: 0 when the group has no row.
	Version int64
}

// KafkaMember is a member of a Kafka group's generation
// (kafka_group_member). Metadata is parallel to Protocols.
type KafkaMember struct {
	MemberID           string   `json:"member_id"`
	InstanceID         *string  `json:"instance_id"`
	ClientID           string   `json:"client_id"`
	ClientHost         string   `json:"client_host"`
	SessionTimeoutMs   int32    `json:"session_timeout_ms"`
	RebalanceTimeoutMs int32    `json:"rebalance_timeout_ms"`
	Protocols          []string `json:"protocols"`
	Metadata           [][]byte `json:"metadata"`
	Assignment         []byte   `json:"assignment"`
}

const kafkaGroupLoad = `SELECT g.protocol_type, g.protocol, g.generation, g.leader, g.state, g.version
  FROM pgmsg.kafka_group g WHERE g.group_name = $1`

const kafkaGroupMembers = `SELECT m.member_id, m.instance_id, m.client_id, m.client_host, m.session_timeout_ms,
       m.rebalance_timeout_ms, m.protocols, m.metadata, m.assignment
  FROM pgmsg.kafka_group_member m WHERE m.group_name = $1 ORDER BY m.member_id`

// KafkaGroupLoad returns the group's persisted state and members; nil
// when the group has no row.
func (s *Store) KafkaGroupLoad(ctx context.Context, exec DBTX, name string) (*KafkaGroup, []KafkaMember, error) {
	db := s.DB(exec)
	g := &KafkaGroup{Name: name}
	err := db.QueryRow(ctx, kafkaGroupLoad, name).Scan(&g.ProtocolType, &g.Protocol, &g.Generation, &g.Leader, &g.State, &g.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, errs.Map(err)
	}
	rows, err := db.Query(ctx, kafkaGroupMembers, name)
	if err != nil {
		return nil, nil, errs.Map(err)
	}
	var members []KafkaMember
	for rows.Next() {
		var m KafkaMember
		if err := rows.Scan(&m.MemberID, &m.InstanceID, &m.ClientID, &m.ClientHost, &m.SessionTimeoutMs,
			&m.RebalanceTimeoutMs, &m.Protocols, &m.Metadata, &m.Assignment); err != nil {
			rows.Close()
			return nil, nil, errs.Map(err)
		}
		members = append(members, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, errs.Map(err)
	}
	return g, members, nil
}

// kafkaGroupSave writes a group's state and members in one statement, over
// the version $7 only: the row is updated when its version is $7 (> 0),
// or inserted when $7 is 0 and there is none. Members not in $8 (a JSON
// array of KafkaMember, bytes in base64) are deleted, the others upserted
// (disjoint rows: one statement may not touch a row twice). It returns
// the new version, or no row when the version did not match.
const kafkaGroupSave = `WITH u AS (
    UPDATE pgmsg.kafka_group g
       SET protocol_type = $2, protocol = $3, generation = $4, leader = $5, state = $6,
           version = g.version + 1, updated_at = pg_catalog.clock_timestamp()
     WHERE g.group_name = $1 AND g.version = $7::bigint AND $7::bigint > 0
    RETURNING g.version
), i AS (
    INSERT INTO pgmsg.kafka_group (group_name, protocol_type, protocol, generation, leader, state, version, updated_at)
    SELECT $1, $2, $3, $4, $5, $6, 1, pg_catalog.clock_timestamp() WHERE $7::bigint = 0
    ON CONFLICT (group_name) DO NOTHING
    RETURNING version
), v AS (
    SELECT u.version FROM u UNION ALL SELECT i.version FROM i
), m AS (
    SELECT x.member_id, x.instance_id, x.client_id, x.client_host, x.session_timeout_ms, x.rebalance_timeout_ms,
           ARRAY(SELECT p.value FROM pg_catalog.jsonb_array_elements_text(x.protocols) WITH ORDINALITY AS p(value, n)
                 ORDER BY p.n) AS protocols,
           ARRAY(SELECT pg_catalog.decode(d.value, 'base64')
                   FROM pg_catalog.jsonb_array_elements_text(x.metadata) WITH ORDINALITY AS d(value, n) ORDER BY d.n) AS metadata,
           pg_catalog.decode(coalesce(x.assignment, ''), 'base64') AS assignment
      FROM pg_catalog.jsonb_to_recordset($8::jsonb) AS x(member_id text, instance_id text, client_id text,
           client_host text, session_timeout_ms integer, rebalance_timeout_ms integer, protocols jsonb,
           metadata jsonb, assignment text)
), d AS (
    DELETE FROM pgmsg.kafka_group_member km
     WHERE km.group_name = $1 AND EXISTS (SELECT 1 FROM v)
       AND NOT EXISTS (SELECT 1 FROM m WHERE m.member_id = km.member_id)
), w AS (
    INSERT INTO pgmsg.kafka_group_member AS km (group_name, member_id, instance_id, client_id, client_host,
           session_timeout_ms, rebalance_timeout_ms, protocols, metadata, assignment)
    SELECT $1, m.member_id, m.instance_id, m.client_id, m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms,
           m.protocols, m.metadata, m.assignment
      FROM m WHERE EXISTS (SELECT 1 FROM v)
    ON CONFLICT (group_name, member_id) DO UPDATE
       SET instance_id = EXCLUDED.instance_id, client_id = EXCLUDED.client_id, client_host = EXCLUDED.client_host,
           session_timeout_ms = EXCLUDED.session_timeout_ms, rebalance_timeout_ms = EXCLUDED.rebalance_timeout_ms,
           protocols = EXCLUDED.protocols, metadata = EXCLUDED.metadata, assignment = EXCLUDED.assignment
)
SELECT v.version FROM v`

// KafkaGroupSave writes g and its members over g.Version. It returns the
// new version, or ok false (nothing written) when the row's version is
// not g.Version: another coordinator wrote the group since.
func (s *Store) KafkaGroupSave(ctx context.Context, exec DBTX, g *KafkaGroup, members []KafkaMember) (version int64, ok bool, err error) {
	if members == nil {
		members = []KafkaMember{}
	}
	js, err := json.Marshal(members)
	if err != nil {
		return 0, false, err
	}
	err = s.DB(exec).QueryRow(ctx, kafkaGroupSave, g.Name, g.ProtocolType, g.Protocol, g.Generation, g.Leader,
		g.State, g.Version, string(js)).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, errs.Map(err)
	}
	return version, true, nil
}

// KafkaGroupVersion returns the version of the group's row, 0 when none.
func (s *Store) KafkaGroupVersion(ctx context.Context, exec DBTX, name string) (int64, error) {
	var v int64
	err := s.DB(exec).QueryRow(ctx, `SELECT coalesce((SELECT g.version FROM pgmsg.kafka_group g WHERE g.group_name = $1), 0)`,
		name).Scan(&v)
	return v, errs.Map(err)
}

// KafkaGroupExists reports whether the group has a Kafka row or cursors
// on any topic (a pgmsg group of that name).
func (s *Store) KafkaGroupExists(ctx context.Context, exec DBTX, name string) (bool, error) {
	var ok bool
	err := s.DB(exec).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pgmsg.kafka_group g WHERE g.group_name = $1)
    OR EXISTS (SELECT 1 FROM pgmsg.consumer_group c WHERE c.group_name = $1)`, name).Scan(&ok)
	return ok, errs.Map(err)
}

// KafkaGroupNativeMembers reports whether a pgmsg group of that name, on
// any topic, has a live member of its own (a native Consumer's).
func (s *Store) KafkaGroupNativeMembers(ctx context.Context, exec DBTX, name string) (bool, error) {
	var ok bool
	err := s.DB(exec).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pgmsg.group_member m WHERE m.group_name = $1
       AND m.heartbeat_at + m.session_timeout >= pg_catalog.clock_timestamp())`, name).Scan(&ok)
	return ok, errs.Map(err)
}

// KafkaGroupDelete removes the Kafka group's row and the pgmsg groups of
// that name on every topic (their cursors: the group's offsets). It
// reports whether anything existed.
func (s *Store) KafkaGroupDelete(ctx context.Context, exec DBTX, name string) (bool, error) {
	var n int64
	err := s.DB(exec).QueryRow(ctx, `WITH k AS (
    DELETE FROM pgmsg.kafka_group g WHERE g.group_name = $1 RETURNING 1
), c AS (
    DELETE FROM pgmsg.consumer_group g WHERE g.group_name = $1 RETURNING 1
)
SELECT (SELECT pg_catalog.count(*) FROM k) + (SELECT pg_catalog.count(*) FROM c)`, name).Scan(&n)
	return n > 0, errs.Map(err)
}

// KafkaGroupListed is a group as ListGroups shows it: a Kafka group's row,
// or a pgmsg group's name (ProtocolType "", State "Empty").
type KafkaGroupListed struct {
	Name         string
	ProtocolType string
	State        string
	Members      int32
}

// KafkaGroupList returns every Kafka group and every other pgmsg group
// name, by name.
func (s *Store) KafkaGroupList(ctx context.Context, exec DBTX) ([]KafkaGroupListed, error) {
	rows, err := s.DB(exec).Query(ctx, `SELECT g.group_name, g.protocol_type, g.state,
       (SELECT pg_catalog.count(*) FROM pgmsg.kafka_group_member m WHERE m.group_name = g.group_name)::integer
  FROM pgmsg.kafka_group g
UNION ALL
SELECT DISTINCT c.group_name, '', 'Empty', 0 FROM pgmsg.consumer_group c
 WHERE NOT EXISTS (SELECT 1 FROM pgmsg.kafka_group g WHERE g.group_name = c.group_name)
ORDER BY 1`)
	if err != nil {
		return nil, errs.Map(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KafkaGroupListed, error) {
		var l KafkaGroupListed
		err := r.Scan(&l.Name, &l.ProtocolType, &l.State, &l.Members)
		return l, err
	})
	return out, errs.Map(err)
}

// KafkaTopicPartitions returns the partition count of each of topics that
// exists.
func (s *Store) KafkaTopicPartitions(ctx context.Context, exec DBTX, topics []string) (map[string]int32, error) {
	rows, err := s.DB(exec).Query(ctx, `SELECT t.name, t.partitions FROM pgmsg.topic t WHERE t.name = ANY($1::text[])`, topics)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := map[string]int32{}
	var name string
	var n int32
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { out[name] = n; return nil })
	return out, errs.Map(err)
}

// kafkaGroupsCreate creates the pgmsg group $1 on each topic of $2 that
// exists and has no such group yet (group_create(), cursors at the
// partitions' starts; false, and nothing changed, where it exists),
// returning the topics it created it on.
// The common case, every group there, calls no function.
const kafkaGroupsCreate = `WITH missing AS MATERIALIZED (
    SELECT t.name FROM pgmsg.topic t
     WHERE t.name = ANY($2::text[])
       AND NOT EXISTS (SELECT 1 FROM pgmsg.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = $1)
)
SELECT missing.name FROM missing WHERE pgmsg.group_create(missing.name, $1, 'earliest')`

// kafkaOffsetsUnset marks every cursor of group $1 on topics $2 as having
// no Kafka offset (unset_epoch: the cursor's claim_epoch now).
const kafkaOffsetsUnset = `INSERT INTO pgmsg.kafka_offset AS k (topic_id, group_name, partition, unset_epoch)
SELECT c.topic_id, c.group_name, c.partition, c.claim_epoch
  FROM pgmsg.group_cursor c JOIN pgmsg.topic t ON t.topic_id = c.topic_id
 WHERE t.name = ANY($2::text[]) AND c.group_name = $1
ON CONFLICT (topic_id, group_name, partition) DO UPDATE
   SET unset_epoch = EXCLUDED.unset_epoch, next_offset = NULL, metadata = NULL, leader_epoch = -1`

// KafkaGroupsEnsure creates the pgmsg group on each of topics that exists
// and lacks it, with every cursor unset for Kafka (OffsetFetch answers -1
// for a partition until a commit, claim or reset positions it). Run it in
// the transaction of the commit that needs the cursors.
func (s *Store) KafkaGroupsEnsure(ctx context.Context, exec DBTX, group string, topics []string) error {
	db := s.DB(exec)
	rows, err := db.Query(ctx, kafkaGroupsCreate, group, topics)
	if err != nil {
		return errs.Map(err)
	}
	created, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return errs.Map(err)
	}
	if len(created) == 0 {
		return nil
	}
	_, err = db.Exec(ctx, kafkaOffsetsUnset, group, created)
	return errs.Map(err)
}

// KafkaOffset is one partition's committed offset as Kafka sees it.
type KafkaOffset struct {
	Topic       string
	Partition   int32
	Offset      int64 // the next offset to read; -1: none
	Metadata    *string
	LeaderEpoch int32
}

// kafkaOffsetCommit moves the cursors of group $1 named by the parallel
// arrays $2..$6 (one element per partition, no partition twice) and keeps
// each commit's metadata. A live native claim on a cursor ends (its commit
// fails with PM009), as a reset would. It returns the partitions whose
// cursor exists: the others are unknown topics or partitions.
const kafkaOffsetCommit = `WITH r AS (
    SELECT x.topic, x.partition, x.next_offset, x.metadata, x.leader_epoch
      FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::integer[]), pg_catalog.unnest($4::bigint[]),
                      pg_catalog.unnest($5::text[]), pg_catalog.unnest($6::integer[]))
           AS x(topic, partition, next_offset, metadata, leader_epoch)
), cur AS (
    UPDATE pgmsg.group_cursor c
       SET next_offset = r.next_offset, committed_at = pg_catalog.clock_timestamp(),
           claim_epoch = CASE WHEN c.claim_expires_at IS NULL THEN c.claim_epoch ELSE c.claim_epoch + 1 END,
           claim_start = NULL, claim_end = NULL, claim_expires_at = NULL, claim_owner = NULL
      FROM r JOIN pgmsg.topic t ON t.name = r.topic
     WHERE c.topic_id = t.topic_id AND c.group_name = $1 AND c.partition = r.partition
    RETURNING c.topic_id, c.partition, r.topic, r.next_offset, r.metadata, r.leader_epoch
), k AS (
    INSERT INTO pgmsg.kafka_offset AS k (topic_id, group_name, partition, next_offset, metadata, leader_epoch, unset_epoch)
    SELECT cur.topic_id, $1, cur.partition, cur.next_offset, cur.metadata, cur.leader_epoch, NULL FROM cur
    ON CONFLICT (topic_id, group_name, partition) DO UPDATE
       SET next_offset = EXCLUDED.next_offset, metadata = EXCLUDED.metadata, leader_epoch = EXCLUDED.leader_epoch,
           unset_epoch = NULL
)
SELECT cur.topic, cur.partition FROM cur`

// KafkaTopicPartition names one partition of a topic.
type KafkaTopicPartition struct {
	Topic     string
	Partition int32
}

// KafkaOffsetCommit sets group's cursors to offs (no partition twice)
// and returns the partitions it set; the pgmsg groups must exist
// (KafkaGroupsEnsure).
func (s *Store) KafkaOffsetCommit(ctx context.Context, exec DBTX, group string, offs []KafkaOffset) ([]KafkaTopicPartition, error) {
	topics := make([]string, len(offs))
	parts := make([]int32, len(offs))
	offsets := make([]int64, len(offs))
	metas := make([]*string, len(offs))
	epochs := make([]int32, len(offs))
	for i, o := range offs {
		topics[i], parts[i], offsets[i], metas[i], epochs[i] = o.Topic, o.Partition, o.Offset, o.Metadata, o.LeaderEpoch
	}
	rows, err := s.DB(exec).Query(ctx, kafkaOffsetCommit, group, topics, parts, offsets, metas, epochs)
	if err != nil {
		return nil, errs.Map(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KafkaTopicPartition, error) {
		var tp KafkaTopicPartition
		err := r.Scan(&tp.Topic, &tp.Partition)
		return tp, err
	})
	return out, errs.Map(err)
}

// kafkaOffsetFetch reads group $1's cursors on topics $2 (NULL: every
// topic) as Kafka offsets: -1 for a cursor marked unset (see
// kafka_offset), the commit's metadata and leader epoch while the cursor
// is where that commit put it.
const kafkaOffsetFetch = `SELECT t.name, c.partition,
       CASE WHEN k.unset_epoch = c.claim_epoch THEN -1 ELSE c.next_offset END,
       CASE WHEN k.unset_epoch IS NULL AND k.next_offset = c.next_offset THEN k.metadata END,
       CASE WHEN k.unset_epoch IS NULL AND k.next_offset = c.next_offset THEN k.leader_epoch ELSE -1 END
  FROM pgmsg.consumer_group g
  JOIN pgmsg.topic t ON t.topic_id = g.topic_id
  JOIN pgmsg.group_cursor c ON c.topic_id = g.topic_id AND c.group_name = g.group_name
  LEFT JOIN pgmsg.kafka_offset k ON k.topic_id = c.topic_id AND k.group_name = c.group_name AND k.partition = c.partition
 WHERE g.group_name = $1 AND ($2::text[] IS NULL OR t.name = ANY($2::text[]))
 ORDER BY t.name, c.partition`

// KafkaOffsetFetch returns group's offsets on topics (nil: every topic
// the group has cursors on), -1 where Kafka has none.
func (s *Store) KafkaOffsetFetch(ctx context.Context, exec DBTX, group string, topics []string) ([]KafkaOffset, error) {
	rows, err := s.DB(exec).Query(ctx, kafkaOffsetFetch, group, topics)
	if err != nil {
		return nil, errs.Map(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KafkaOffset, error) {
		var o KafkaOffset
		err := r.Scan(&o.Topic, &o.Partition, &o.Offset, &o.Metadata, &o.LeaderEpoch)
		return o, err
	})
	return out, errs.Map(err)
}

// kafkaOffsetDelete marks group $1's cursors of the partitions $2/$3 as
// having no Kafka offset.
const kafkaOffsetDelete = `INSERT INTO pgmsg.kafka_offset AS k (topic_id, group_name, partition, unset_epoch)
SELECT c.topic_id, c.group_name, c.partition, c.claim_epoch
  FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::integer[])) AS r(topic, partition)
  JOIN pgmsg.topic t ON t.name = r.topic
  JOIN pgmsg.group_cursor c ON c.topic_id = t.topic_id AND c.group_name = $1 AND c.partition = r.partition
ON CONFLICT (topic_id, group_name, partition) DO UPDATE
   SET unset_epoch = EXCLUDED.unset_epoch, next_offset = NULL, metadata = NULL, leader_epoch = -1`

// kafkaGroupsDropUnset deletes group $1's pgmsg groups on topics $2 whose
// every cursor is unset for Kafka and that have no native member: nothing
// is left of them, and they would hold retention back.
const kafkaGroupsDropUnset = `DELETE FROM pgmsg.consumer_group g USING pgmsg.topic t
 WHERE t.topic_id = g.topic_id AND g.group_name = $1 AND t.name = ANY($2::text[])
   AND NOT EXISTS (SELECT 1 FROM pgmsg.group_cursor c
                     LEFT JOIN pgmsg.kafka_offset k
                       ON k.topic_id = c.topic_id AND k.group_name = c.group_name AND k.partition = c.partition
                    WHERE c.topic_id = g.topic_id AND c.group_name = g.group_name
                      AND k.unset_epoch IS DISTINCT FROM c.claim_epoch)
   AND NOT EXISTS (SELECT 1 FROM pgmsg.group_member m WHERE m.topic_id = g.topic_id AND m.group_name = g.group_name)`

// KafkaOffsetDelete removes group's Kafka offsets of tps: OffsetFetch
// answers -1 for them from then on, and a pgmsg group left with no offset
// at all on its topic is deleted.
func (s *Store) KafkaOffsetDelete(ctx context.Context, exec DBTX, group string, tps []KafkaTopicPartition) error {
	topics := make([]string, len(tps))
	parts := make([]int32, len(tps))
	for i, tp := range tps {
		topics[i], parts[i] = tp.Topic, tp.Partition
	}
	db := s.DB(exec)
	if _, err := db.Exec(ctx, kafkaOffsetDelete, group, topics, parts); err != nil {
		return errs.Map(err)
	}
	_, err := db.Exec(ctx, kafkaGroupsDropUnset, group, topics)
	return errs.Map(err)
}
