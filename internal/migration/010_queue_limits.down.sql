-- pgmsg 010 down: no rate limits. The migrator has dropped the functions;
-- the previous binary's `migrate up` creates its own again.
ALTER TABLE {{schema}}.queue DROP COLUMN IF EXISTS rate_limit, DROP COLUMN IF EXISTS max_running,
    DROP COLUMN IF EXISTS rate_tokens, DROP COLUMN IF EXISTS rate_at;
