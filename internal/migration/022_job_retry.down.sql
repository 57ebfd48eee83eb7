-- Reverts 022.
DROP FUNCTION IF EXISTS {{schema}}.job_retry(bigint);
