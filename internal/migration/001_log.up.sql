-- pgmsg 001: the log's tables (topics, partitions, segments, records,
-- consumer groups, producers' idempotence state, the maintenance log).
--
-- Versioned migrations hold tables, indexes, sequences, roles and data
-- changes; every function lives once in internal/migration/functions and
-- is re-applied by the migrator when a file changes (see that package's
-- documentation). {{schema}} is replaced by the quoted schema name and
-- {{schema_lit}} by the schema name as a quoted string literal before this
-- file runs. Nothing else is templated.

CREATE TABLE {{schema}}.topic (
    topic_id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text        NOT NULL UNIQUE,
    partitions       integer     NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    -- Records per segment (one range partition of one topic partition).
    segment_records  bigint      NOT NULL DEFAULT 1048576 CHECK (segment_records >= 16),
    -- Largest key + value + headers accepted for one record, in bytes.
    max_record_bytes integer     NOT NULL DEFAULT 1048576 CHECK (max_record_bytes > 0),
    -- Free-form settings for later features (retention, cleanup policy ...).
    config           jsonb       NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT topic_name_valid CHECK (name ~ '^[A-Za-z0-9._-]{1,200}$')
);

-- One row per topic partition: the partition's offset counter. Publishers
-- lock this row (UPDATE) to reserve a contiguous offset range; the lock is
-- what makes offsets gapless and increasing in commit order. No indexed
-- column is ever updated and fillfactor leaves room, so updates are HOT.
CREATE TABLE {{schema}}.topic_partition (
    topic_id     integer NOT NULL REFERENCES {{schema}}.topic ON DELETE CASCADE,
    partition    integer NOT NULL,
    next_offset  bigint  NOT NULL DEFAULT 0,   -- offset the next record gets
    start_offset bigint  NOT NULL DEFAULT 0,   -- lowest offset still stored
    segment_end  bigint  NOT NULL DEFAULT 0,   -- exclusive end of created segments
    compacted_to bigint  NOT NULL DEFAULT 0,   -- next_offset when compaction last ran
    -- Byte counter, the byte twin of next_offset: key + value bytes appended
    -- so far. Kept only while the topic has max_lag_bytes (backpressure).
    next_byte    bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
) WITH (fillfactor = 50);

-- Segments: one range partition of the record table per (topic, partition,
-- offset range). Retention drops whole segments (retention_run).
CREATE TABLE {{schema}}.segment (
    topic_id     integer NOT NULL,
    partition    integer NOT NULL,
    start_offset bigint  NOT NULL,
    end_offset   bigint  NOT NULL,            -- exclusive
    relname      text    NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, partition, start_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES {{schema}}.topic_partition ON DELETE CASCADE
);

-- Records. LIST-partitioned by topic; each topic's table is RANGE-partitioned
-- by (partition, offset) into segments. The primary key is the only index.
CREATE TABLE {{schema}}.record (
    topic_id    integer     NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    "timestamp" timestamptz NOT NULL,
    key         bytea,
    value       bytea,
    headers     jsonb,
    -- The partition's byte counter just before the record was appended (its
    -- first byte); NULL unless the topic has max_lag_bytes. A NULL costs no
    -- storage: the row's null bitmap already has room for it.
    byte_position bigint,
    PRIMARY KEY (topic_id, partition, "offset")
) PARTITION BY LIST (topic_id);

CREATE TABLE {{schema}}.consumer_group (
    topic_id       integer     NOT NULL REFERENCES {{schema}}.topic ON DELETE CASCADE,
    group_name     text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, group_name),
    CONSTRAINT consumer_group_name_valid CHECK (group_name ~ '^[A-Za-z0-9._-]{1,200}$')
);

-- One durable cursor per (topic, group, partition) plus at most one claim.
-- A claim is held while claim_expires_at is set and in the future; its
-- identity is claim_epoch, which every claim and reset increments.
CREATE TABLE {{schema}}.group_cursor (
    topic_id         integer NOT NULL,
    group_name       text    NOT NULL,
    partition        integer NOT NULL,
    next_offset      bigint  NOT NULL,
    claim_epoch      bigint  NOT NULL DEFAULT 0,
    claim_start      bigint,
    claim_end        bigint,                   -- inclusive
    claim_expires_at timestamptz,
    claim_owner      text,
    claimed_at       timestamptz,
    committed_at     timestamptz,
    -- Membership (group_heartbeat): the member the partition is assigned
    -- to, the assignment's generation, and the member it is being handed to
    -- once the owner's live claim ends.
    owner            text,
    owner_epoch      bigint NOT NULL DEFAULT 0,
    next_owner       text,
    owned_at         timestamptz,
    -- Records this group never read because retention's hard limit dropped
    -- them first (never silent: also logged in maintenance_event).
    skipped          bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, group_name, partition),
    FOREIGN KEY (topic_id, group_name) REFERENCES {{schema}}.consumer_group ON DELETE CASCADE
) WITH (fillfactor = 50);

-- Live members of a group (group_heartbeat). A member whose last heartbeat
-- is older than its session timeout (database clock) is dead: the next
-- heartbeat of any member removes it and reassigns its partitions.
CREATE TABLE {{schema}}.group_member (
    topic_id        integer     NOT NULL,
    group_name      text        NOT NULL,
    member_id       text        NOT NULL,
    joined_at       timestamptz NOT NULL,
    heartbeat_at    timestamptz NOT NULL,
    session_timeout interval    NOT NULL,
    PRIMARY KEY (topic_id, group_name, member_id),
    FOREIGN KEY (topic_id, group_name) REFERENCES {{schema}}.consumer_group ON DELETE CASCADE
);

-- What maintenance did (retention, group expiry, compaction, segments,
-- producer expiry), for `pgmsg maintenance events` and the HTTP API.
CREATE TABLE {{schema}}.maintenance_event (
    event_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind       text        NOT NULL,   -- retention_drop, retention_skip, group_expired, compacted, ...
    topic      text        NOT NULL,
    group_name text,
    partition  integer,
    detail     jsonb       NOT NULL DEFAULT '{}'
);

-- Idempotent publish (as Kafka's enable.idempotence): for each topic
-- partition, each producer's last stored batch, read and written under the
-- partition's counter row lock. A batch whose sequences are exactly those
-- stored is a retry (nothing written, the stored offsets returned); a
-- batch starting after them is stored; anything else is refused (PM015).
-- Rows of producers idle for longer than maintenance's producer_ttl are
-- deleted (producer_state_expire).
CREATE TABLE {{schema}}.producer_state (
    topic_id       integer     NOT NULL,
    partition      integer     NOT NULL,
    producer_id    text        NOT NULL,
    first_sequence bigint      NOT NULL,
    last_sequence  bigint      NOT NULL,
    base_offset    bigint      NOT NULL,
    record_count   integer     NOT NULL,
    "timestamp"    timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (topic_id, partition, producer_id),
    FOREIGN KEY (topic_id, partition) REFERENCES {{schema}}.topic_partition ON DELETE CASCADE
);
CREATE INDEX producer_state_updated ON {{schema}}.producer_state (updated_at);
