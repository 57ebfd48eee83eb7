-- pgmsg 029 down: no min_insync_replicas setting. The migrator has dropped
-- the functions and the guard's triggers with them.
DROP TABLE IF EXISTS {{schema}}.db_setting;
