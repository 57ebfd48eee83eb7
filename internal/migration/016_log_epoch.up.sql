-- pgmsg 016: log epochs.
--
-- A partition's log epoch changes when the log's history may have changed
-- under it: the server is a promoted standby (its timeline is not the one
-- the partition's last publish ran on), which may lack the last records
-- the old primary acknowledged, so that the offsets past its end will be
-- given to other records. Claims return the epoch; a client that saw
-- offsets of an earlier epoch past that epoch's end on this server (what
-- log_epoch_end() answers) reports the truncation instead of handing the
-- new records at those offsets over as if nothing happened
-- (docs/reliability.md, "What a failover does").
--
-- log_timeline: the timeline the partition's last publish ran on (0: not
-- known yet; the first publish records it without a new epoch).
ALTER TABLE {{schema}}.topic_partition
    ADD COLUMN log_epoch    integer NOT NULL DEFAULT 0,
    ADD COLUMN log_timeline integer NOT NULL DEFAULT 0;

-- The partitions so far are of this server's timeline (_partitions_add
-- sets it for new ones).
UPDATE {{schema}}.topic_partition
   SET log_timeline = ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::integer;

-- One row per epoch after the first: where it began on this server.
-- Epoch e ends where the next epoch in this table begins (the current
-- epoch at the partition's next_offset).
CREATE TABLE {{schema}}.log_epoch (
    topic_id     integer     NOT NULL,
    partition    integer     NOT NULL,
    epoch        integer     NOT NULL,
    start_offset bigint      NOT NULL,
    timeline     integer     NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (topic_id, partition, epoch),
    FOREIGN KEY (topic_id, partition) REFERENCES {{schema}}.topic_partition ON DELETE CASCADE
);

-- claim_range returns the claimed partition's log epoch: the function file
-- creates it again.
DROP FUNCTION IF EXISTS {{schema}}.claim_range(text, text, integer, interval, integer, text, text, boolean, boolean, integer, bigint, bigint);
