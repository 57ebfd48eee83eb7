package pgmsg_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/pgmsg/pgmsg"
)

// A Producer gathers the records of many goroutines into few
// transactions; each record's promise is called once it is stored.
func ExampleClient_NewProducer() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "metrics", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	producer, err := client.NewProducer(nil)
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	stored := 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := &pgmsg.Record{Topic: "metrics", Value: fmt.Appendf(nil, "cpu=%d", i)}
			producer.Produce(ctx, rec, func(r *pgmsg.Record, err error) {
				if err != nil {
					log.Print(err)
					return
				}
				mu.Lock()
				stored++
				mu.Unlock()
			})
		}()
	}
	wg.Wait()
	// Close flushes what is buffered and waits for every promise.
	if err := producer.Close(ctx); err != nil {
		log.Fatal(err)
	}
	d, err := client.DescribeTopic(ctx, "metrics")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored", stored, "next offset", d.PartitionInfo[0].NextOffset)
	// Output:
	// stored 100 next offset 100
}
