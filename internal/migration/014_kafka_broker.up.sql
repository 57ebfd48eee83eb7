-- pgmsg 014: the Kafka listener's state (internal/kafkasrv).
--
-- kafka_producer_id hands out the producer ids of InitProducerId: an
-- idempotent Kafka producer's batches are stored by publish_idempotent()
-- under the producer id 'kafka-<id>-<epoch>', so the sequences it checks
-- live in producer_state and survive a reconnect or another listener.
--
-- kafka_broker is the cluster's registry: each `pgmsg serve --kafka-listen`
-- process holds one node id while it heartbeats. A broker whose heartbeat
-- is older than its session timeout is dead: Metadata stops listing it,
-- and the partitions it led and the groups it coordinated move to the live
-- ones (the rule is computed alike by every listener over the live rows).
CREATE SEQUENCE {{schema}}.kafka_producer_id;

CREATE TABLE {{schema}}.kafka_broker (
    node_id         integer     PRIMARY KEY CHECK (node_id >= 0),
    host            text        NOT NULL,
    port            integer     NOT NULL CHECK (port BETWEEN 1 AND 65535),
    -- A random id of the process holding the node id: a restarted process
    -- takes its node id back only once the old holder's session ended.
    instance        text        NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    session_timeout interval    NOT NULL
);
