package pgmsg

import (
	"context"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// Workflow builds a batch of jobs that depend on one another by name, a
// DAG, for EnqueueWorkflow: each job is claimable once every job it
// depends on completed. Add jobs in any order; the enqueue refuses a name
// of no job (ErrUnknownDependency) and a cycle (ErrDependencyCycle).
type Workflow struct {
	params []EnqueueParams
}

// NewWorkflow returns an empty workflow.
func NewWorkflow() *Workflow { return &Workflow{} }

// Add adds the job p named name, depending on the jobs of the workflow
// named deps (added before or after it), to those of p.DependsOnNames and
// to the existing jobs p.DependsOn. It returns w, for chaining.
func (w *Workflow) Add(name string, p EnqueueParams, deps ...string) *Workflow {
	p.Name = name
	if len(deps) > 0 {
		p.DependsOnNames = append(append([]string(nil), p.DependsOnNames...), deps...)
	}
	w.params = append(w.params, p)
	return w
}

// Params returns the workflow's jobs, in the order added, as EnqueueMany
// takes them.
func (w *Workflow) Params() []EnqueueParams { return w.params }

// EnqueueWorkflow enqueues w's jobs into queue in one statement, as
// EnqueueMany does, and returns their results by name. All or nothing:
// a refused workflow stores no job.
func (c *Client) EnqueueWorkflow(ctx context.Context, queue string, w *Workflow, opts *EnqueueOpts) (map[string]*EnqueueResult, error) {
	res, err := c.EnqueueMany(ctx, queue, w.params, opts)
	if err != nil {
		return nil, err
	}
	return workflowResults(w, res), nil
}

// EnqueueWorkflowTx is EnqueueWorkflow on exec (see EnqueueManyTx).
func (c *Client) EnqueueWorkflowTx(ctx context.Context, exec DBTX, queue string, w *Workflow, opts *EnqueueOpts) (map[string]*EnqueueResult, error) {
	res, err := c.EnqueueManyTx(ctx, exec, queue, w.params, opts)
	if err != nil {
		return nil, err
	}
	return workflowResults(w, res), nil
}

func workflowResults(w *Workflow, res []*EnqueueResult) map[string]*EnqueueResult {
	out := make(map[string]*EnqueueResult, len(res))
	for i, r := range res {
		out[w.params[i].Name] = r
	}
	return out
}

// WorkflowJob is one job of a workflow, as GetWorkflow reports it.
type WorkflowJob struct {
	ID         int64    `json:"id"`
	WorkflowID int64    `json:"workflow_id,omitempty"`
	Queue      string   `json:"queue"`
	State      JobState `json:"state"`
	Kind       string   `json:"kind,omitempty"`
	// DependsOn are the job's dependencies; DepsWaiting how many of them
	// it still waits for (0 unless pending).
	DependsOn           []int64 `json:"depends_on,omitempty"`
	DepsWaiting         int     `json:"deps_waiting,omitempty"`
	IgnoreCancelledDeps bool    `json:"ignore_cancelled_deps,omitempty"`
	IgnoreDeadDeps      bool    `json:"ignore_dead_deps,omitempty"`
	// Level is the job's depth in the workflow: 0 for a job without
	// dependencies among the jobs listed, else one more than its deepest
	// dependency's.
	Level       int        `json:"level"`
	EnqueuedAt  time.Time  `json:"enqueued_at"`
	AttemptedAt *time.Time `json:"attempted_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// GetWorkflowOpts are options of GetWorkflow; nil means defaults.
type GetWorkflowOpts struct {
	// Limit is the most jobs returned, 1 to 100,000; 0 means 10,000.
	Limit int
}

// GetWorkflow returns the jobs of the workflow job id belongs to (the
// jobs enqueued with names or dependencies together, and those enqueued
// later depending on them), live and archived (until pruned), by id, each
// with its state and dependencies. A job outside any workflow is returned
// alone. It fails with ErrUnknownJob, and ErrInvalidArgument for a Limit
// out of range.
func (c *Client) GetWorkflow(ctx context.Context, id int64, opts *GetWorkflowOpts) ([]*WorkflowJob, error) {
	limit := 10000
	if opts != nil && opts.Limit != 0 {
		limit = opts.Limit
	}
	if limit < 1 || limit > 100000 {
		return nil, errs.New(errs.InvalidArgument, "limit must be from 1 to 100000, got %d", limit)
	}
	rows, err := c.queues.WorkflowGet(ctx, id, limit)
	if err != nil {
		return nil, err
	}
	out := make([]*WorkflowJob, len(rows))
	byID := make(map[int64]*WorkflowJob, len(rows))
	for i, r := range rows {
		out[i] = &WorkflowJob{ID: r.ID, WorkflowID: r.WorkflowID, Queue: r.Queue, State: JobState(r.State), Kind: r.Kind,
			DependsOn: r.DependsOn, DepsWaiting: r.DepsWaiting, IgnoreCancelledDeps: r.IgnoreCancelledDeps,
			IgnoreDeadDeps: r.IgnoreDeadDeps, EnqueuedAt: r.EnqueuedAt, AttemptedAt: r.AttemptedAt, FinishedAt: r.FinishedAt}
		byID[r.ID] = out[i]
	}
	// Levels, by a walk down each job's dependencies (a workflow has no
	// cycle; a job of a batch may depend on a later one, with a higher id).
	done := make(map[int64]bool, len(out))
	var level func(j *WorkflowJob) int
	level = func(j *WorkflowJob) int {
		if done[j.ID] {
			return j.Level
		}
		done[j.ID] = true
		for _, d := range j.DependsOn {
			if dj, ok := byID[d]; ok {
				j.Level = max(j.Level, level(dj)+1)
			}
		}
		return j.Level
	}
	for _, j := range out {
		level(j)
	}
	return out, nil
}
