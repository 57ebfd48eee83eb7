package pgmsg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Tag jobs, record progress and a result, and find them again.
func ExampleClient_ListJobs() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	for _, day := range []string{"2026-11-30", "2026-12-01"} {
		_, err := client.Enqueue(ctx, "reports", pgmsg.EnqueueParams{
			Payload:  []byte(`{"day":"` + day + `"}`),
			Tags:     []string{"customer:42", "daily"},
			Metadata: json.RawMessage(`{"requested_by":"ann"}`),
		}, nil)
		if err != nil {
			log.Fatal(err)
		}
	}
	// A handler (here claimed by hand) reports progress and a result.
	jobs, err := client.ClaimJobs(ctx, "reports", &pgmsg.ClaimJobsOpts{Max: 1})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.SetJobProgress(ctx, jobs[0], map[string]int{"pages": 10}); err != nil {
		log.Fatal(err)
	}
	if err := jobs[0].SetResult(map[string]string{"url": "s3://reports/1.pdf"}); err != nil {
		log.Fatal(err)
	}
	if err := client.Complete(ctx, jobs[0]); err != nil {
		log.Fatal(err)
	}

	found, err := client.ListJobs(ctx, "reports", &pgmsg.ListJobsOpts{Tag: "customer:42"})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range found {
		fmt.Println(j.State, string(j.Payload), j.Tags, string(j.Progress), string(j.Result))
	}
	// Output:
	// completed {"day":"2026-11-30"} [customer:42 daily] {"pages": 10} {"url": "s3://reports/1.pdf"}
	// available {"day":"2026-12-01"} [customer:42 daily]
}
