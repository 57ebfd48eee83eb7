-- pgmsg 005 down: dead jobs are kept until acted on. The migrator has
-- dropped the functions; the previous binary's `migrate up` creates its
-- own again.
ALTER TABLE {{schema}}.queue DROP COLUMN IF EXISTS dead_retention;
