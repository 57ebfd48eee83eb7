package pgmsgtype

import "time"

// Claim is a leased, contiguous range of one partition's records for one
// group. Commit it to advance the group; if it is neither committed nor
// released before ExpiresAt, its records are delivered again.
type Claim struct {
	Topic     string
	Group     string
	Partition int32
	// Epoch identifies the claim; Commit, Release and Extend present it.
	Epoch     int64
	ExpiresAt time.Time
	Records   []*Record
	// LogEpoch is the partition's log epoch when the claim was made: it
	// changes when a failover may have changed the log's history
	// (Client.LogEpochEnd; docs/reliability.md, "What a failover does").
	LogEpoch int32
}

// NextOffset is the offset after the claim's last record.
func (cl *Claim) NextOffset() int64 {
	return cl.Records[len(cl.Records)-1].Offset + 1
}
