package pgmsgkafka

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if goroutines leaked: every client,
// consumer and kfake cluster a test starts is closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
