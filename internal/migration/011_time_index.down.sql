-- pgmsg 011 down: no time index. The migrator has dropped the functions;
-- the previous binary's `migrate up` creates its own again.
DROP TABLE IF EXISTS {{schema}}.time_index;
