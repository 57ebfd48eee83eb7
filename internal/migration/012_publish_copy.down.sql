-- pgmsg 012 down: no COPY publishes. The migrator has dropped the functions.
DO $down$
DECLARE
    seq oid;
BEGIN
    FOR seq IN SELECT offset_seq FROM {{schema}}.topic_partition WHERE offset_seq IS NOT NULL LOOP
        EXECUTE format('DROP SEQUENCE IF EXISTS %s', seq::regclass);
    END LOOP;
END $down$;
ALTER TABLE {{schema}}.record ALTER COLUMN "offset" DROP DEFAULT, ALTER COLUMN "timestamp" DROP DEFAULT;
ALTER TABLE {{schema}}.topic_partition DROP COLUMN offset_seq;
