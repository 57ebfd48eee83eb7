-- pgmsg 032 down: nothing to revert in the tables. The migrator has
-- dropped the functions and the triggers that call them; the previous
-- binary's `migrate up` creates its seven triggers again.
SELECT 1;
