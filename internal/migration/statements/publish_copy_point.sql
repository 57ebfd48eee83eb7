-- publish_copy_point points the record table's offset default at offset
-- sequence {{2}} (through the setting named {{1}}) and sets the sequence
-- so that the next row takes offset {{3}}: a COPY publish's rows then take
-- the offsets reserved for them (publish_copy_reserve.sql), in order. Its
-- value is text. The Go client's COPY publish
-- (internal/store/log_publish_copy.go's copyBeginSQL) and
-- _publish_copy_begin() both run it.
pg_catalog.set_config({{1}}, {{2}}::text, true) || pg_catalog.setval({{2}}::regclass, {{3}}, false)::text
