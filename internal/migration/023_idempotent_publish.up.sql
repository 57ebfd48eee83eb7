-- 023: idempotent publish (issue 18, item 1), as Kafka's
-- enable.idempotence. A publish whose answer is lost (the connection broke
-- during the commit) and is sent again must not store its records twice.
-- The publisher names itself (a producer id) and numbers its records (a
-- sequence); for each topic partition pgmsg keeps the producer's last
-- stored batch in producer_state, read and written under the partition's
-- counter row lock, which every publisher of the partition takes first:
--
--   * a batch whose sequences are exactly those of the last stored batch
--     is a retry: nothing is written and the stored offsets are returned;
--   * a batch that starts after the last stored sequence is stored;
--   * anything else (a batch that overlaps, or starts before, what is
--     stored) is refused with PM015 and writes nothing.
--
-- Sequences must grow per partition; gaps are allowed (a producer that
-- gave up on a batch moves on past it), so a lost batch is not detected,
-- only a repeated or reordered one. producer_state rows of producers idle
-- for longer than the maintenance's producer_ttl are deleted; a retry after
-- that is stored again.

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

-- publish_idempotent publishes as publish() does, as producer p_producer_id
-- with the records numbered from p_sequence in the order they are stored:
-- by partition, then in the order given. The partition of an unkeyed
-- record is drawn from the producer id and the sequence instead of at
-- random, so that a retry lands where the first attempt did. Every
-- partition's batch is a retry (duplicate true: nothing written, the
-- stored offsets and publish time returned) or none is: a call that is
-- partly stored is refused with PM015. Other errors are publish()'s.
CREATE FUNCTION {{schema}}.publish_idempotent(p_topic text, p_producer_id text, p_sequence bigint, p_values bytea[],
                                              p_keys bytea[] DEFAULT NULL, p_headers jsonb[] DEFAULT NULL,
                                              p_timestamps timestamptz[] DEFAULT NULL, p_partition integer DEFAULT NULL,
                                              p_notify boolean DEFAULT true)
RETURNS TABLE (partition integer, base_offset bigint, record_count integer, "timestamp" timestamptz,
               segments_low boolean, duplicate boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    t      {{schema}}.topic;
    n      integer := coalesce(cardinality(p_values), 0);
    spread integer;
    g      record;
    r      record;
    st     {{schema}}.producer_state;
    seq    bigint;
    parts  integer[] := '{}';
    dups   integer := 0;
BEGIN
    t := {{schema}}._topic(p_topic);
    IF p_producer_id IS NULL OR octet_length(p_producer_id) NOT BETWEEN 1 AND 200 THEN
        PERFORM {{schema}}._raise('PM004', 'producer id must be 1 to 200 bytes');
    END IF;
    IF n = 0 THEN
        PERFORM {{schema}}._raise('PM010', 'empty batch: publish needs at least one record');
    END IF;
    IF p_sequence IS NULL OR p_sequence < 0 OR p_sequence > 9223372036854775807 - n THEN
        PERFORM {{schema}}._raise('PM004', format('sequence must be from 0 to %s, got %s',
                                                  9223372036854775807 - n, coalesce(p_sequence::text, 'NULL')));
    END IF;
    -- publish() checks the rest (a partition out of range included: it
    -- has no counter row and no state, so it reaches publish()); the
    -- arrays' lengths are checked here because they shape the batches
    -- compared with the stored ones, before publish() runs.
    IF coalesce(cardinality(p_keys), 0) > n OR coalesce(cardinality(p_headers), 0) > n
       OR coalesce(cardinality(p_timestamps), 0) > n THEN
        PERFORM {{schema}}._raise('PM004', 'keys, headers and timestamps must not be longer than values');
    END IF;
    spread := ((hashtextextended(p_producer_id || '/' || p_sequence, 0) & 9223372036854775807) % t.partitions)::integer;

    -- Check every partition's batch under its counter row lock (taken in
    -- partition order, as every publisher does) before writing any.
    seq := p_sequence;
    FOR g IN
        SELECT coalesce(p_partition, CASE WHEN u.k IS NULL THEN spread ELSE {{schema}}.partition_for_key(u.k, t.partitions) END) AS p,
               count(*)::integer AS c
          FROM unnest(p_values, p_keys) AS u(v, k)
         GROUP BY 1 ORDER BY 1
    LOOP
        PERFORM 1 FROM {{schema}}.topic_partition c
         WHERE c.topic_id = t.topic_id AND c.partition = g.p FOR NO KEY UPDATE;
        SELECT * INTO st FROM {{schema}}.producer_state s
         WHERE s.topic_id = t.topic_id AND s.partition = g.p AND s.producer_id = p_producer_id;
        IF FOUND THEN
            IF st.first_sequence = seq AND st.last_sequence = seq + g.c - 1 THEN
                dups := dups + 1;
            ELSIF seq <= st.last_sequence THEN
                PERFORM {{schema}}._raise('PM015', format(
                    'sequence out of order: producer %s sent records %s to %s for topic %s partition %s, '
                    'whose last stored batch is %s to %s (a retry sends the same records with the same sequence)',
                    left(quote_literal(p_producer_id), 210), seq, seq + g.c - 1, quote_literal(t.name), g.p,
                    st.first_sequence, st.last_sequence));
            END IF;
        END IF;
        parts := parts || g.p;
        seq := seq + g.c;
    END LOOP;
    IF dups > 0 THEN
        IF dups < cardinality(parts) THEN
            PERFORM {{schema}}._raise('PM015', format(
                'sequence out of order: producer %s sent records %s to %s for topic %s, of which only some partitions'' batches are stored',
                left(quote_literal(p_producer_id), 210), p_sequence, p_sequence + n - 1, quote_literal(t.name)));
        END IF;
        RETURN QUERY SELECT s.partition, s.base_offset, s.record_count, s."timestamp", false, true
                       FROM {{schema}}.producer_state s
                      WHERE s.topic_id = t.topic_id AND s.producer_id = p_producer_id AND s.partition = ANY (parts)
                      ORDER BY s.partition;
        RETURN;
    END IF;

    seq := p_sequence;
    FOR g IN
        SELECT coalesce(p_partition, CASE WHEN u.k IS NULL THEN spread ELSE {{schema}}.partition_for_key(u.k, t.partitions) END) AS p,
               array_agg(u.v ORDER BY u.ord) AS vs, array_agg(u.k ORDER BY u.ord) AS ks,
               array_agg(u.h ORDER BY u.ord) AS hs, array_agg(u.ts ORDER BY u.ord) AS tss
          FROM unnest(p_values, p_keys, p_headers, p_timestamps) WITH ORDINALITY AS u(v, k, h, ts, ord)
         GROUP BY 1 ORDER BY 1
    LOOP
        FOR r IN SELECT * FROM {{schema}}.publish(p_topic, g.vs, g.ks, g.hs, g.tss, g.p, false) LOOP
            INSERT INTO {{schema}}.producer_state AS s (topic_id, partition, producer_id, first_sequence, last_sequence,
                                                        base_offset, record_count, "timestamp")
            VALUES (t.topic_id, g.p, p_producer_id, seq, seq + r.record_count - 1, r.base_offset, r.record_count, r."timestamp")
            ON CONFLICT (topic_id, partition, producer_id) DO UPDATE
               SET first_sequence = excluded.first_sequence, last_sequence = excluded.last_sequence,
                   base_offset = excluded.base_offset, record_count = excluded.record_count,
                   "timestamp" = excluded."timestamp", updated_at = clock_timestamp();
            seq := seq + r.record_count;
            RETURN QUERY SELECT r.partition, r.base_offset, r.record_count, r."timestamp", r.segments_low, false;
        END LOOP;
    END LOOP;
    IF p_notify THEN
        PERFORM pg_notify({{schema_lit}} || '_log', t.name);
    END IF;
END $$;

-- producer_state_expire deletes up to p_max producer states idle for longer
-- than p_older_than (maintenance's producer_ttl, default 7 days, as
-- Kafka's transactional.id.expiration.ms); returns how many.
CREATE FUNCTION {{schema}}.producer_state_expire(p_older_than interval, p_max integer DEFAULT 10000)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    IF p_older_than IS NULL OR p_older_than < interval '0' OR p_max IS NULL OR p_max < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'producer_state_expire needs a non-negative age and a positive maximum');
    END IF;
    DELETE FROM {{schema}}.producer_state s
     WHERE s.ctid = ANY (ARRAY(SELECT x.ctid FROM {{schema}}.producer_state x
                                WHERE x.updated_at < clock_timestamp() - p_older_than LIMIT p_max));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- _roles_grant: as in 020, plus producer_state for the producer role.
CREATE OR REPLACE FUNCTION {{schema}}._roles_grant()
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s       text := {{schema_lit}};
    r       text;
    rel     text;
    n       integer := 0;
BEGIN
    FOREACH r IN ARRAY ARRAY['producer', 'consumer', 'worker', 'admin'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_' || r);
        n := n + 1;
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', s, s || '_' || r);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_producer') THEN
        EXECUTE format('GRANT SELECT ON %I.topic, %I.segment TO %I', s, s, s || '_producer');
        EXECUTE format('GRANT SELECT, UPDATE ON %I.topic_partition TO %I', s, s || '_producer');
        EXECUTE format('GRANT INSERT ON %I.record TO %I', s, s || '_producer');
        -- Backpressure reads the groups' cursors; segment creation logs.
        EXECUTE format('GRANT SELECT ON %I.group_cursor, %I.consumer_group TO %I', s, s, s || '_producer');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_producer');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_producer');
        -- Idempotent publishes keep each producer's last batch (023).
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.producer_state TO %I', s, s || '_producer');
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I._segment_lock(integer), %I._segment_create(integer, integer, bigint, bigint), '
                       '%I._segment_ensure(integer, integer, bigint, bigint, bigint) TO %I', s, s, s, s || '_producer');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_consumer') THEN
        EXECUTE format('GRANT SELECT ON %I.topic, %I.topic_partition, %I.segment, %I.record TO %I',
                       s, s, s, s, s || '_consumer');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.consumer_group, %I.group_cursor TO %I', s, s, s || '_consumer');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.group_member TO %I', s, s || '_consumer');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_consumer');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_consumer');
        -- Consumers read a claimed range straight from its segment table;
        -- _segment_create grants new segments to whoever may read record.
        FOR rel IN SELECT g.relname FROM {{schema}}.segment g LOOP
            EXECUTE format('GRANT SELECT ON %I.%I TO %I', s, rel, s || '_consumer');
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_worker') THEN
        EXECUTE format('GRANT SELECT, INSERT ON %I.queue TO %I', s, s || '_worker');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.queue_queue_id_seq, %I.job_id_seq TO %I', s, s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.job TO %I', s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT ON %I.job_archive TO %I', s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.job_payload TO %I', s, s || '_worker');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_worker');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_worker');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_admin') THEN
        FOR rel IN
            SELECT c.relname FROM pg_class c WHERE c.relnamespace = s::regnamespace
               AND c.relkind IN ('r', 'p') AND c.relname <> 'pgmsg_migration'
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON %I.%I TO %I', s, rel, s || '_admin');
        END LOOP;
        EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, s || '_admin');
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I._segment_lock(integer), %I._segment_create(integer, integer, bigint, bigint), '
                       '%I._segment_ensure(integer, integer, bigint, bigint, bigint), %I.topic_create(text, integer, jsonb), '
                       '%I.topic_delete(text), %I.topic_add_partitions(text, integer), %I.topic_configure(text, jsonb), '
                       '%I.retention_run(integer), %I.compact_run(integer), %I.segments_ensure() TO %I',
                       s, s, s, s, s, s, s, s, s, s, s || '_admin');
    END IF;
    RETURN n;
END $function$;

SELECT {{schema}}._roles_grant();
