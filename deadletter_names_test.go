package pgmsg

import (
	"testing"

	"github.com/pgmsg/pgmsg/internal/deadletter"
)

// TestDeadLetterNames: the public names of the dead-letter format spell
// the strings internal/deadletter writes and reads.
func TestDeadLetterNames(t *testing.T) {
	for _, c := range [][2]string{
		{DeadLetterHeaderTopic, deadletter.HeaderTopic},
		{DeadLetterHeaderPartition, deadletter.HeaderPartition},
		{DeadLetterHeaderOffset, deadletter.HeaderOffset},
		{DeadLetterHeaderGroup, deadletter.HeaderGroup},
		{DeadLetterHeaderError, deadletter.HeaderError},
		{DeadLetterHeaderDeliveries, deadletter.HeaderDeliveries},
		{ReplayHeaderGroup, deadletter.ReplayHeaderGroup},
		{DeadLetterSuffix, deadletter.Suffix},
		{ReplayGroupSuffix, deadletter.ReplayGroupSuffix},
	} {
		if c[0] != c[1] {
			t.Errorf("pgmsg has %q, internal/deadletter %q", c[0], c[1])
		}
	}
}
