-- claim_epoch: the epoch of a new claim of a group's partition, from the
-- token {{1}} drawn for it (lease_token.sql) and the epoch {{2}} of the
-- claim it replaces: the drawn token, or the next one when it equals
-- {{2}}, so that a claim's epoch never fences its predecessor's holder
-- in. The Go client's claim statements (internal/store/log_claim.go,
-- log_claim_gather.go) and claim_range() (through _claim_token()) both
-- apply it.
CASE WHEN {{1}} = {{2}} THEN {{sql token_next({{1}})}} ELSE {{1}} END
