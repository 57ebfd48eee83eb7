-- Token scopes can name consumer groups (issue 18): consume:PATTERN allows
-- every group of the matching topics, consume:PATTERN/group:GROUP_PATTERN
-- only the matching groups. The HTTP server enforces them
-- (pgmsg.Token.AllowsGroup); the SQL API only checks their shape.

CREATE OR REPLACE FUNCTION {{schema}}._check_scopes(p_scopes text[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    s text;
BEGIN
    IF p_scopes IS NULL OR cardinality(p_scopes) = 0 THEN
        PERFORM {{schema}}._raise('PM004', 'a token needs at least one scope');
    END IF;
    FOREACH s IN ARRAY p_scopes LOOP
        IF s IS NULL OR NOT (s = 'admin'
                             OR s ~ '^(publish|consume|enqueue|claim):[A-Za-z0-9._*-]{1,200}$'
                             OR s ~ '^consume:[A-Za-z0-9._*-]{1,200}/group:[A-Za-z0-9._*-]{1,200}$') THEN
            PERFORM {{schema}}._raise('PM004', format(
                'invalid scope %s: use admin, publish|consume|enqueue|claim:PATTERN or consume:PATTERN/group:PATTERN (letters, digits, ".", "_", "-", "*")',
                left(quote_literal(coalesce(s, 'NULL')), 80)));
        END IF;
    END LOOP;
END $$;
