// Package maintenance runs pgmsg's maintenance (River's
// internal/maintenance is the model): a run of a list of tasks, each once
// and in order, with every task's result (RunOnce), and the election of
// one leader per schema that runs maintenance every interval and due
// periodic jobs every second while it leads (Elector).
//
// The tasks themselves, their order and the public result types are the
// root package's: its Client builds the one list and hands it over, and
// converts the results. This package knows no task by name.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Task is a named maintenance step. Run returns how many items it
// handled; it must work in bounded batches and short transactions, and be
// safe to run concurrently with the same task elsewhere (the leader only
// avoids duplicate work).
type Task struct {
	Name string
	Run  func(ctx context.Context) (int64, error)
}

// TaskResult is one task's outcome in a run.
type TaskResult struct {
	Items    int64
	Duration time.Duration
	// Err is the task's error, nil when it succeeded.
	Err error
}

// RunOnce runs every task once, in the order given, whatever the others
// returned, and returns each task's result by name and the tasks' errors
// joined (each prefixed "maintenance task NAME: ").
func RunOnce(ctx context.Context, tasks []Task) (map[string]TaskResult, error) {
	results := make(map[string]TaskResult, len(tasks))
	var errs []error
	for _, t := range tasks {
		start := time.Now()
		n, err := t.Run(ctx)
		results[t.Name] = TaskResult{Items: n, Duration: time.Since(start), Err: err}
		if err != nil {
			errs = append(errs, fmt.Errorf("maintenance task %s: %w", t.Name, err))
		}
	}
	return results, errors.Join(errs...)
}
