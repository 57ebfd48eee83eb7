package errs

import "errors"

// IsLostClaim reports whether err says a claim on a partition is no longer
// the caller's (ClaimExpired: its lease ran out; ClaimNotHeld: another
// claim or a release ended it). Such a commit wrote nothing and the
// records are delivered again, so callers that commit on the way to the
// next claim (the claim engine, the Consumer) drop the commit rather than
// fail.
func IsLostClaim(err error) bool {
	return errors.Is(err, ClaimExpired) || errors.Is(err, ClaimNotHeld)
}
