-- pgmsg 012: publishing a batch with COPY.
--
-- The Go client appends a partition's batch of records with one simple-query
-- message: _publish_copy_begin(), COPY into the record table, then
-- _publish_copy_end() (functions/log.sql; docs/architecture.md). COPY writes
-- a page of records per WAL record where INSERT writes one per record, and
-- it may not call a volatile function per row; so the record's offset comes
-- from a column default, nextval() of a sequence per partition that
-- _publish_copy_begin() sets to the offsets it reserved on the partition's
-- counter row (whose lock it holds until the commit), and the timestamp
-- from statement_timestamp(), as publish() stamps it. The default names the
-- partition's sequence through a transaction-local setting, so an INSERT
-- that gives no offset still fails, as it did before.

-- The partition's offset sequence, created on its first COPY publish
-- (_offset_seq_create); dropped with the topic's table, which owns it.
ALTER TABLE {{schema}}.topic_partition ADD COLUMN offset_seq oid;

ALTER TABLE {{schema}}.record
    ALTER COLUMN "offset" SET DEFAULT nextval(current_setting('pgmsg.copy_offset_seq')::oid::regclass),
    ALTER COLUMN "timestamp" SET DEFAULT statement_timestamp();
