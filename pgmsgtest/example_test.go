package pgmsgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

// An application's tests: TestMain hands the package to Main, so that
// each New finds its schema migrated already; each test still has a
// schema of its own, and may run in parallel with the others.
func ExampleNew() {
	// In a _test.go file of the application:
	//
	//	func TestMain(m *testing.M) { pgmsgtest.Main(m) }
	//
	//	func TestOrderEvents(t *testing.T) {
	//		t.Parallel()
	//		testOrderEvents(t, testPool(t)) // testPool: the application's pool on a test database
	//	}
	testOrderEvents := func(t *testing.T, pool *pgxpool.Pool) {
		env := pgmsgtest.New(t, pool, &pgmsg.Config{})
		ctx := context.Background()
		if _, err := env.Client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 3}); err != nil {
			t.Fatal(err)
		}
		recs := []*pgmsg.Record{{Topic: "orders", Key: []byte("order-1"), Value: []byte(`{"total":42}`)}}
		if err := env.Client.Publish(ctx, recs, nil); err != nil {
			t.Fatal(err)
		}
		// ... run the application's consumer on env.Client and check what it did.
	}
	_ = testOrderEvents
}
