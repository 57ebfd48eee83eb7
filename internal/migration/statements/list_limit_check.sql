-- list_limit_check: the check of a list function's page size {{1}} (its
-- p_limit parameter): from 1 to 10,000, else PM004. sequence_list() and
-- key_limit_list() run it first.
IF {{1}} IS NULL OR {{1}} < 1 OR {{1}} > 10000 THEN
    PERFORM {{schema}}._raise('PM004', format('limit must be from 1 to 10000, got %s', coalesce({{1}}::text, 'NULL')));
END IF;
