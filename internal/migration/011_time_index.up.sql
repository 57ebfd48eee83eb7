-- pgmsg 011: a sparse time index per partition.
--
-- An entry (offset, max_timestamp) says that every record of the partition
-- before offset has a timestamp at or before max_timestamp, the largest of
-- them (as Kafka's time index keeps the largest timestamp so far). Entries
-- are written by maintenance (time_index_run), one per time_index_stride
-- records, from records already committed. A seek by time (_position,
-- offset_for_time) starts from the last entry whose max_timestamp is before
-- the time sought, and the first entry at or after it bounds the search: one
-- stride's worth of records read through the primary key, instead of a
-- scan of the partition. Records past the last entry (published since the
-- last maintenance run) are searched from there.

CREATE TABLE {{schema}}.time_index (
    topic_id      integer     NOT NULL,
    partition     integer     NOT NULL,
    "offset"      bigint      NOT NULL,
    max_timestamp timestamptz NOT NULL,
    PRIMARY KEY (topic_id, partition, "offset"),
    FOREIGN KEY (topic_id, partition) REFERENCES {{schema}}.topic_partition ON DELETE CASCADE
);
