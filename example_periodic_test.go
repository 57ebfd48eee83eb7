package pgmsg_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// Enqueue a report every weekday at 07:00 in Paris; the maintenance leader
// (RunMaintenance, which pgmsg serve runs) enqueues each tick once.
func ExampleClient_AddPeriodicJob() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateQueue(ctx, "reports", pgmsg.QueueConfig{}); err != nil {
		log.Fatal(err)
	}
	p, err := client.AddPeriodicJob(ctx, pgmsg.PeriodicJob{
		Queue: "reports", Name: "weekday-report", Schedule: "0 7 * * MON-FRI", TimeZone: "Europe/Paris",
		Kind: "report", Payload: []byte(`{"report":"daily"}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	next := p.NextRunAt.In(paris)
	fmt.Println(p.Name, next.Format("15:04"), next.Weekday() >= time.Monday && next.Weekday() <= time.Friday)

	// The ticks after Friday 2026-12-04, 12:00 in Paris: Monday to Wednesday.
	ticks, err := client.PreviewSchedule(ctx, p.Schedule, p.TimeZone, time.Date(2026, 12, 4, 12, 0, 0, 0, paris), 3)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range ticks {
		fmt.Println(t.In(paris).Format("Mon 2006-01-02 15:04 MST"))
	}
	// Output:
	// weekday-report 07:00 true
	// Mon 2026-12-07 07:00 CET
	// Tue 2026-12-08 07:00 CET
	// Wed 2026-12-09 07:00 CET
}
