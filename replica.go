package pgmsg

import (
	"time"

	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Read replicas: claims, commits and cursors stay on the
// primary; the records of a claim are read from a streaming replica when
// it holds all of them, else from the primary, and a replica never causes
// a short read. internal/logread reads them (its replica.go says how);
// the root keeps the settings (Config.ReadReplicas, Config.ReplicaMaxWait)
// and the counters' public names.

// ReplicaMaxWaitDefault is how long a claim's read waits for a lagging
// replica before it reads from the primary.
const ReplicaMaxWaitDefault = 100 * time.Millisecond

// ReplicaStats are one read replica's counters since the client started
// (pgmsgtype.ReplicaStats).
type ReplicaStats = pgmsgtype.ReplicaStats

// ReplicaReadStats are the client's read replica counters
// (pgmsgtype.ReplicaReadStats).
type ReplicaReadStats = pgmsgtype.ReplicaReadStats

// GatheredClaims is how many of the client's claims went out gathered
// with other groups' claims of the same partition, in one statement each
// batch (Config.ClaimGatherWait), since the client was made.
func (c *Client) GatheredClaims() int64 { return c.reader.GatheredClaims() }

// CachedRecordsServed is how many records the client's claims took from
// its record cache instead of reading them (Config.RecordCacheBytes),
// since the client was made.
func (c *Client) CachedRecordsServed() int64 { return c.reader.CachedRecordsServed() }

// ReplicaStats returns the read replicas' counters since the client
// started (nil without Config.ReadReplicas). pgmsgprom exposes them.
func (c *Client) ReplicaStats() *ReplicaReadStats {
	return c.reader.ReplicaStats()
}
