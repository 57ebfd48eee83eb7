-- timeline: the timeline this server writes WAL on (the first eight hex
-- digits of the current WAL file's name); it changes when a standby is
-- promoted. _timeline() returns it; the publish statements that must not
-- call a function with a pinned search_path (a call keeps a statement's
-- cached plan from inlining it and saves and restores the setting)
-- write it out: _publish_direct(), _publish_copy_begin() and the Go
-- client's COPY publish (internal/store/log_publish_copy.go).
('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::integer
