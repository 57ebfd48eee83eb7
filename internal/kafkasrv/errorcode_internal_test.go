package kafkasrv

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pgmsg/pgmsg"
)

// A produce that min_insync_replicas refused (PM124) is answered as Kafka
// answers one with fewer in-sync replicas than min.insync.replicas:
// NOT_ENOUGH_REPLICAS (19), which producers retry.
func TestErrorCodeNotEnoughReplicas(t *testing.T) {
	code, _ := errorCode(pgmsg.NewError(pgmsg.ErrNotEnoughReplicas, nil, "not enough replicas"))
	if code != kerr.NotEnoughReplicas.Code || code != 19 {
		t.Fatalf("code %d, want NOT_ENOUGH_REPLICAS (19)", code)
	}
	if !kerr.IsRetriable(kerr.ErrorForCode(code)) {
		t.Fatal("NOT_ENOUGH_REPLICAS is not retriable")
	}
}
