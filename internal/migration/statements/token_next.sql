-- token_next: the lease token (or claim epoch) after {{1}} among the
-- tokens [1, 2^53-1] (exact in JSON for JavaScript and jq, which read
-- numbers as doubles), 2^53-1 followed by 1. Job k of a job claim gets
-- token_next(first + k - 1); a claim epoch drawn equal to the one it
-- replaces becomes its token_next (claim_epoch.sql).
(({{1}}) % 9007199254740991 + 1)
