-- job_claim_set: the SET list of a job claim's UPDATE of the job j it
-- claims, the k.ord-th job of the claim in claim order: running, its
-- attempt counted, the lease token token_next({{1}} + k.ord - 1) after the
-- claim's first token {{1}} (token_next.sql), its lease until {{2}},
-- attempted at {{3}} by the worker {{4}}. The Go worker's direct claim
-- (jobClaimDirectSQL, internal/store/job_claim.go) and _job_claim() both
-- run it; TestJobClaimParity holds the two alike.
state = 'running', attempt = j.attempt + 1, lease_token = {{sql token_next({{1}} + k.ord - 1)}},
lease_expires_at = {{2}}, attempted_at = {{3}}, worker = {{4}}
