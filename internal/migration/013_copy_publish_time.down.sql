-- pgmsg 013 down: the COPY's records stamped by statement_timestamp() again.
ALTER TABLE {{schema}}.record ALTER COLUMN "timestamp" SET DEFAULT statement_timestamp();
