-- pgmsg 021 down: heartbeats read the group again. The migrator has
-- dropped the functions that use these columns.
ALTER TABLE {{schema}}.group_member
    DROP COLUMN IF EXISTS generation, DROP COLUMN IF EXISTS partitions,
    DROP COLUMN IF EXISTS owner_epochs, DROP COLUMN IF EXISTS revoking;
ALTER TABLE {{schema}}.consumer_group
    DROP COLUMN IF EXISTS generation, DROP COLUMN IF EXISTS steady_until;
ALTER TABLE {{schema}}.group_member RESET (fillfactor);
