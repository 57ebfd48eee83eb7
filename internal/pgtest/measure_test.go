package pgtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// TestMeasureSetup reports how long sequential tests wait for their schema
// (in Schema) and for its removal (in the cleanups), with a test body of
// PGMSG_TEST_MEASURE (a duration, e.g. 300ms) during which the background
// supply may work. It only runs when that variable is set; it asserts
// nothing about the times, which depend on the machine.
//
//	PGMSG_TEST_MEASURE=300ms go test -run TestMeasureSetup -v ./internal/pgtest
func TestMeasureSetup(t *testing.T) {
	body, err := time.ParseDuration(os.Getenv("PGMSG_TEST_MEASURE"))
	if err != nil {
		t.Skip("set PGMSG_TEST_MEASURE to a test body's duration to measure")
	}
	const n = 20
	var setup, teardown time.Duration
	for range n {
		var end time.Time
		t.Run("schema", func(t *testing.T) {
			t0 := time.Now()
			b := pgtest.Schema(t, nil)
			setup += time.Since(t0)
			if _, err := b.Pool.Exec(context.Background(), "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(body)
			end = time.Now()
		})
		teardown += time.Since(end)
	}
	t.Logf("Schema: %d tests, body %v: setup %v, teardown %v per test", n, body, setup/n, teardown/n)
	setup, teardown = 0, 0
	for range n {
		var end time.Time
		t.Run("tx", func(t *testing.T) {
			t0 := time.Now()
			tx := pgtest.Tx(t)
			setup += time.Since(t0)
			if _, err := tx.Exec(context.Background(), "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(body)
			end = time.Now()
		})
		teardown += time.Since(end)
	}
	t.Logf("Tx: %d tests, body %v: setup %v, teardown %v per test", n, body, setup/n, teardown/n)
}
