-- log_epoch_next: the log epoch of a partition in epoch {{1}} whose last
-- publish ran on timeline {{2}}, on a server writing timeline {{3}}: the
-- same epoch on the same timeline (or when the timeline is not known yet,
-- 0), else a new one, numbered at least the timeline it begins on
-- (greatest is a construct of SQL, not a function of pg_catalog).
-- _log_epoch_bump() starts it at the first publish on the new timeline;
-- the Kafka listener answers it before that publish
-- (internal/store/kafka.go), so that a Kafka client learns of the new
-- epoch as soon as the server is a promoted standby.
CASE WHEN {{2}} = 0 OR {{2}} = {{3}} THEN {{1}} ELSE greatest({{1}} + 1, {{3}}) END
