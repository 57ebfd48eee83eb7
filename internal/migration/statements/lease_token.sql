-- lease_token: a lease token (or claim epoch) drawn from {{1}}, the text
-- of a random version 4 UUID without its dashes: 64 of its random bits
-- (its version nibble and variant bits left out), masked to 53 bits, 0
-- (probability 2^-53) mapped to 1. _lease_token() and _claim_token()
-- draw with it; the Go client draws the same way from the operating
-- system's source (internal/store's leaseTokenOf, held equal to this by
-- TestLeaseTokenParity). {{1}} is read three times: pass a column or a
-- variable, not a call.
greatest(('x' || pg_catalog.substr({{1}}, 1, 12) || pg_catalog.substr({{1}}, 14, 3) || pg_catalog.substr({{1}}, 18, 1))::bit(64)::bigint
         & 9007199254740991, 1)
