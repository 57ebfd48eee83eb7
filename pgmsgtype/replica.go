package pgmsgtype

// ReplicaStats are one read replica's counters since the client started
// (pgmsg.Client.ReplicaStats).
type ReplicaStats struct {
	// Replica is the replica's host:port.
	Replica string
	// Reads is how many claims' records it served, Records how many
	// records.
	Reads, Records int64
	// Fallbacks is how many claims it could not serve (it lagged past
	// ReplicaMaxWait, failed or was promoted): the primary read them.
	Fallbacks int64
	// LagBytes is how far its replay position was behind a claim's
	// position when last measured (0 when it had caught up).
	LagBytes int64
	// Healthy is false while the replica is skipped after a fallback.
	Healthy bool
	// LastError describes the last fallback ("" when none).
	LastError string
}

// ReplicaReadStats are the client's read replica counters.
type ReplicaReadStats struct {
	// Replicas are Config.ReadReplicas' counters, in that order.
	Replicas []ReplicaStats
	// PrimaryReads and PrimaryRecords count the claims, and their
	// records, read on the primary although replicas are configured.
	PrimaryReads, PrimaryRecords int64
}
