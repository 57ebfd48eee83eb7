package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func newQueue(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Enqueue jobs, work them, and inspect queues and their dead-letter jobs",
		Long: `A queue hands each job to one worker; failed jobs retry with backoff and,
out of attempts, go to the dead-letter state with their error history.
Queues are created by their first enqueue, or with queue create.`,
	}
	cmd.AddCommand(newQueueCreate(g), newQueueConfig(g), newQueueList(g), newQueueDelete(g),
		newQueueEnqueue(g), newQueueWork(g), newQueueStats(g), newQueueDead(g), newQueueRetry(g), newQueueJob(g),
		newQueueJobs(g), newQueuePeriodic(g),
		newQueuePause(g, true), newQueuePause(g, false), newQueueSequences(g), newQueueResumeSequence(g),
		newQueueLimitKeys(g), newQueueWorkflow(g), newQueueTenants(g), newQueueTenantWeight(g), newQueueBatch(g))
	return cmd
}

// newQueueWorkflow is "queue workflow": the jobs of a job's workflow.
func newQueueWorkflow(g *globals) *cobra.Command {
	var o pgmsg.GetWorkflowOpts
	cmd := &cobra.Command{
		Use:   "workflow JOB-ID",
		Short: "Show the jobs of a job's workflow: each one's level, state and dependencies",
		Long: `workflow shows the jobs of the workflow JOB-ID belongs to (jobs enqueued
with --depends-on, and the jobs they depend on), live and archived, by
level (0: no dependency) then id: each one's state, dependencies and, while
it waits for them (pending), how many have not completed yet.`,
		Example: `  pgmsg queue workflow 42
  pgmsg queue workflow 42 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("%w: job id %q is not a number", pgmsg.ErrInvalidArgument, args[0])
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			jobs, err := c.GetWorkflow(cmd.Context(), id, &o)
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(jobs)
			}
			sort.SliceStable(jobs, func(i, k int) bool { return jobs[i].Level < jobs[k].Level })
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "LEVEL	ID	STATE	KIND	DEPENDS ON	WAITING FOR")
			for _, j := range jobs {
				deps := make([]string, len(j.DependsOn))
				for i, d := range j.DependsOn {
					deps[i] = strconv.FormatInt(d, 10)
				}
				waiting := "-"
				if j.State == pgmsg.JobStatePending {
					waiting = strconv.Itoa(j.DepsWaiting)
				}
				fmt.Fprintf(w, "%d	%d	%s	%s	%s	%s\n", j.Level, j.ID, j.State, orDash(j.Kind), orDash(strings.Join(deps, ",")), waiting)
			}
			return w.Flush()
		},
	}
	cmd.Flags().IntVar(&o.Limit, "limit", 10000, "most jobs shown (1 to 100000)")
	return cmd
}

// newQueueSequences is "queue sequences": a queue's sequences.
func newQueueSequences(g *globals) *cobra.Command {
	var o pgmsg.ListSequencesOpts
	cmd := &cobra.Command{
		Use:   "sequences QUEUE",
		Short: "List a queue's sequences: each one's head, waiting jobs, and what holds it",
		Long: `sequences lists QUEUE's sequences (jobs enqueued with --sequence-key run one
at a time, in order) that have a head or are held, by key. A sequence is
held when a job of it went dead or was cancelled (unless enqueued with
--sequence-continue): its other jobs wait until "pgmsg queue
resume-sequence QUEUE KEY", or until the dead job is requeued (pgmsg queue
dead requeue), which then runs next.`,
		Example: `  pgmsg queue sequences sync
  pgmsg queue sequences sync --held`,
		Args: cobra.ExactArgs(1),
		RunE: queueListRunE(g, func(ctx context.Context, c *pgmsg.Client, queue string) ([]*pgmsg.Sequence, error) {
			return c.ListSequences(ctx, queue, &o)
		}, "KEY\tHEAD\tSTATE\tPENDING\tHELD BY\tREASON\tHELD SINCE", func(w io.Writer, s *pgmsg.Sequence) {
			head, held, since := "-", "-", "-"
			if s.HeadID != 0 {
				head = fmt.Sprint(s.HeadID)
			}
			if s.HeldJobID != 0 {
				held = fmt.Sprint(s.HeldJobID)
			}
			if s.HeldAt != nil {
				since = s.HeldAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Key, head, orDash(string(s.HeadState)), s.Pending, held,
				orDash(s.HeldReason), since)
		}),
	}
	cmd.Flags().BoolVar(&o.HeldOnly, "held", false, "held sequences only")
	cmd.Flags().IntVar(&o.Limit, "limit", 100, "most sequences listed (1 to 10000)")
	cmd.Flags().StringVar(&o.AfterKey, "after", "", "list keys after this one (the last of the previous page)")
	return cmd
}

// newQueueLimitKeys is "queue limit-keys": a queue's limit keys in use.
func newQueueLimitKeys(g *globals) *cobra.Command {
	var o pgmsg.ListLimitKeysOpts
	cmd := &cobra.Command{
		Use:   "limit-keys QUEUE",
		Short: "List a queue's limit keys (--key-limit) in use: each one's running, waiting and pending jobs",
		Long: `limit-keys lists the keys of QUEUE's per-key limit (pgmsg queue create
--key-limit; a job's key is its --limit-key, else its payload's --key-field)
that have admitted or pending jobs, by key: how many run, how many more are
admitted (waiting to run), and how many wait for a place (pending).`,
		Example: `  pgmsg queue limit-keys emails
  pgmsg queue limit-keys emails --after customer-42 --limit 1000`,
		Args: cobra.ExactArgs(1),
		RunE: queueListRunE(g, func(ctx context.Context, c *pgmsg.Client, queue string) ([]*pgmsg.LimitKey, error) {
			return c.ListLimitKeys(ctx, queue, &o)
		}, "KEY\tRUNNING\tWAITING\tPENDING", func(w io.Writer, k *pgmsg.LimitKey) {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", k.Key, k.Running, k.Waiting, k.Pending)
		}),
	}
	cmd.Flags().IntVar(&o.Limit, "limit", 100, "most keys listed (1 to 10000)")
	cmd.Flags().StringVar(&o.AfterKey, "after", "", "list keys after this one (the last of the previous page)")
	return cmd
}

// newQueueTenants is "queue tenants": a fair queue's tenants.
func newQueueTenants(g *globals) *cobra.Command {
	var o pgmsg.ListTenantsOpts
	cmd := &cobra.Command{
		Use:   "tenants QUEUE",
		Short: "List a fair queue's tenants: each one's weight, jobs and virtual tags",
		Long: `tenants lists the tenants of QUEUE (jobs enqueued with --tenant make a queue
fair: it serves its tenants by weight, so one tenant's backlog does not
starve another's jobs), by name: each one's weight, jobs enqueued in all
and not claimed yet, and how far its finish tag is ahead of the queue's
virtual time (AHEAD, in jobs at weight 1).`,
		Example: `  pgmsg queue tenants reports
  pgmsg queue tenants reports --after acme --limit 1000`,
		Args: cobra.ExactArgs(1),
		RunE: queueListRunE(g, func(ctx context.Context, c *pgmsg.Client, queue string) ([]*pgmsg.Tenant, error) {
			return c.ListTenants(ctx, queue, &o)
		}, "TENANT\tWEIGHT\tENQUEUED\tWAITING\tAHEAD", func(w io.Writer, t *pgmsg.Tenant) {
			fmt.Fprintf(w, "%s\t%g\t%d\t%d\t%.1f\n", t.Tenant, t.Weight, t.Enqueued, t.Waiting, max(t.FinishTag-t.VirtualTime, 0))
		}),
	}
	cmd.Flags().IntVar(&o.Limit, "limit", 100, "most tenants listed (1 to 10000)")
	cmd.Flags().StringVar(&o.AfterTenant, "after", "", "list tenants after this one (the last of the previous page)")
	return cmd
}

// newQueueTenantWeight is "queue tenant-weight": set a tenant's weight.
func newQueueTenantWeight(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "tenant-weight QUEUE TENANT WEIGHT",
		Short: "Set a tenant's weight in a fair queue (default 1)",
		Long: `tenant-weight sets TENANT's weight in QUEUE: among the tenants with jobs
waiting, each gets weight / the sum of their weights of the claims. It
applies to the tenant's jobs enqueued afterwards. WEIGHT is from 0.001 to
1000000.`,
		Example: `  pgmsg queue tenant-weight reports acme 2`,
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			w, err := strconv.ParseFloat(args[2], 64)
			if err != nil {
				return fmt.Errorf("%w: weight %q is not a number", pgmsg.ErrInvalidTenantWeight, args[2])
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if err := c.SetTenantWeight(cmd.Context(), args[0], args[1], w); err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"queue": args[0], "tenant": args[1], "weight": w})
			}
			fmt.Fprintf(g.stdout, "tenant %q of queue %q: weight %g\n", args[1], args[0], w)
			return nil
		},
	}
}

// queueListRunE is the RunE of a command that lists rows of its QUEUE
// argument (queue sequences, queue limit-keys): list reads them, and
// they are printed as a JSON array (empty, not null, when there are none)
// or as a table: the header line, then row's line for each.
func queueListRunE[T any](g *globals, list func(ctx context.Context, c *pgmsg.Client, queue string) ([]T, error),
	header string, row func(w io.Writer, r T)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		js, err := g.jsonOutput()
		if err != nil {
			return err
		}
		c, done, err := g.client(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		rows, err := list(cmd.Context(), c, args[0])
		if err != nil {
			return err
		}
		if js {
			if rows == nil {
				rows = []T{}
			}
			return g.printJSON(rows)
		}
		w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, header)
		for _, r := range rows {
			row(w, r)
		}
		return w.Flush()
	}
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// newQueueResumeSequence is "queue resume-sequence": resume a held sequence.
func newQueueResumeSequence(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resume-sequence QUEUE KEY",
		Short: "Resume a held sequence: its next waiting job runs",
		Long: `resume-sequence resumes sequence KEY of QUEUE, held since a job of it went
dead or was cancelled: the next job of the sequence runs, and the failed job
stays dead (or cancelled). To run the dead job again first instead, requeue
it (pgmsg queue dead requeue QUEUE --id ID): that resumes the sequence too.`,
		Example: `  pgmsg queue resume-sequence sync account-42`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			ok, err := c.ResumeSequence(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"queue": args[0], "sequence_key": args[1], "resumed": ok})
			}
			if ok {
				fmt.Fprintf(g.stdout, "sequence %q of queue %q resumed\n", args[1], args[0])
			} else {
				fmt.Fprintf(g.stdout, "sequence %q of queue %q was not held; nothing changed\n", args[1], args[0])
			}
			return nil
		},
	}
}

func newQueueJob(g *globals) *cobra.Command {
	var (
		encoding string
		logs     bool
	)
	cmd := &cobra.Command{
		Use:   "job JOB_ID",
		Short: "Show one job, live or archived: state, attempts, errors, timeout, payload, progress, result",
		Long: `job shows one job, live or archived. With --logs it also shows what its
handlers logged, per attempt, and the step checkpoints it recorded (in
JSON: the job's fields plus "logs" and "steps").`,
		Example: `  pgmsg queue job 42
  pgmsg queue job 42 --logs
  pgmsg queue job 42 -o json --encoding base64`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			if err := checkEncoding(encoding); err != nil {
				return err
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return fmt.Errorf("job id must be a positive integer, got %q", args[0])
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			j, err := c.GetJob(cmd.Context(), id)
			if err != nil {
				return err
			}
			jj := wire.EncodeJob(j, encoding)
			var (
				jobLogs  []pgmsg.JobLog
				jobSteps []pgmsg.JobStep
			)
			if logs {
				if jobLogs, err = c.JobLogs(cmd.Context(), id); err != nil {
					return err
				}
				if jobSteps, err = c.JobSteps(cmd.Context(), id); err != nil {
					return err
				}
			}
			if js && logs {
				return g.printJSON(struct {
					wire.JobJSON
					Logs  []pgmsg.JobLog  `json:"logs"`
					Steps []pgmsg.JobStep `json:"steps"`
				}{jj, append([]pgmsg.JobLog{}, jobLogs...), append([]pgmsg.JobStep{}, jobSteps...)})
			}
			if js {
				return g.printJSON(jj)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
			row("id", strconv.FormatInt(j.ID, 10))
			row("queue", j.Queue)
			row("state", string(j.State))
			row("kind", dash(j.Kind))
			row("priority", strconv.Itoa(j.Priority))
			row("attempts", fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts))
			row("enqueued", fmtTime(&j.EnqueuedAt))
			row("run at", fmtTime(j.RunAt))
			row("finished", fmtTime(j.FinishedAt))
			timeout := "-"
			if j.Timeout > 0 {
				timeout = j.Timeout.String()
			}
			row("timeout", timeout)
			row("worker", dash(j.Worker))
			row("unique key", dash(j.UniqueKey))
			row("sequence key", dash(j.SequenceKey))
			row("limit key", dash(j.LimitKey))
			row("payload", string(jj.Payload)+" ("+jj.PayloadEncoding+")")
			row("tags", dash(strings.Join(j.Tags, ", ")))
			row("metadata", dash(string(j.Metadata)))
			row("progress", dash(string(j.Progress)))
			row("result", dash(string(j.Result)))
			if len(j.DependsOn) > 0 {
				deps := make([]string, len(j.DependsOn))
				for i, d := range j.DependsOn {
					deps[i] = strconv.FormatInt(d, 10)
				}
				waiting := ""
				if j.State == pgmsg.JobStatePending {
					waiting = fmt.Sprintf(" (waiting for %d)", j.DepsWaiting)
				}
				row("depends on", strings.Join(deps, ", ")+waiting)
				row("workflow", fmt.Sprintf("%d (pgmsg queue workflow %d)", j.WorkflowID, j.ID))
			}
			if j.BatchID != 0 {
				row("batch", fmt.Sprintf("%d (pgmsg queue batch show %d)", j.BatchID, j.BatchID))
			}
			for _, e := range j.Errors {
				row(fmt.Sprintf("error, attempt %d", e.Attempt), fmtTime(&e.At)+" "+e.Error)
			}
			for _, s := range jobSteps {
				row(fmt.Sprintf("step %s, attempt %d", s.Name, s.Attempt), fmtTime(&s.At)+" "+dash(string(s.Output)))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if logs && len(jobLogs) == 0 {
				fmt.Fprintln(g.stdout, "no logs")
			}
			for _, l := range jobLogs {
				fmt.Fprintf(g.stdout, "--- log, attempt %d (%s) %s\n%s", l.Attempt, l.Outcome, fmtTime(&l.At), l.Log)
				if !strings.HasSuffix(l.Log, "\n") {
					fmt.Fprintln(g.stdout)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&encoding, "encoding", wire.EncodingAuto, "payload format: auto, json, text or base64")
	cmd.Flags().BoolVar(&logs, "logs", false, "also show what the job's handlers logged, per attempt, and its step checkpoints")
	return cmd
}

func newQueueJobs(g *globals) *cobra.Command {
	var (
		state, kind, tag, since, until, order string
		limit                                 int
		after                                 int64
	)
	cmd := &cobra.Command{
		Use:   "jobs QUEUE",
		Short: "List a queue's jobs, live and archived, by id: filter by state, kind, tag and enqueue time",
		Long: `jobs lists a queue's jobs, waiting, running and dead ones and the archived
(completed and cancelled) ones, by id: oldest first, or newest first with
--order desc. Page with --after and the last id printed, in the same order.`,
		Example: `  pgmsg queue jobs emails --order desc --limit 20
  pgmsg queue jobs emails --state running
  pgmsg queue jobs emails --kind welcome --since 2026-12-01T00:00:00Z --limit 50
  pgmsg queue jobs emails --after 1200 -o json
  pgmsg queue jobs emails --order desc --after 1200`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			if order != string(pgmsg.JobOrderAsc) && order != string(pgmsg.JobOrderDesc) {
				return fmt.Errorf("%w: --order must be asc or desc, got %q", pgmsg.ErrInvalidArgument, order)
			}
			opts := &pgmsg.ListJobsOpts{State: pgmsg.JobState(state), Kind: kind, Tag: tag, Limit: limit, AfterID: after,
				Order: pgmsg.JobOrder(order)}
			for _, f := range []struct {
				name, v string
				to      *time.Time
			}{{"since", since, &opts.Since}, {"until", until, &opts.Until}} {
				if f.v == "" {
					continue
				}
				t, err := wire.ParseTime("--"+f.name, f.v)
				if err != nil {
					return err
				}
				*f.to = t
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			jobs, err := c.ListJobs(cmd.Context(), args[0], opts)
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(wire.EncodeJobs(jobs, wire.EncodingAuto))
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATE\tKIND\tATTEMPTS\tENQUEUED\tFINISHED")
			for _, j := range jobs {
				fmt.Fprintf(w, "%d\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, j.State, dash(j.Kind), j.Attempt, j.MaxAttempts,
					fmtTime(&j.EnqueuedAt), fmtTime(j.FinishedAt))
			}
			if len(jobs) == 0 {
				fmt.Fprintln(w, "(no jobs)")
			} else if len(jobs) == opts.Limit || (opts.Limit == 0 && len(jobs) == 100) {
				more := fmt.Sprintf("--after %d", jobs[len(jobs)-1].ID)
				if opts.Order == pgmsg.JobOrderDesc {
					more = "--order desc " + more
				}
				fmt.Fprintf(w, "(more may follow: %s)\n", more)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only jobs in this state: available, scheduled, retrying, running, dead, pending, completed, cancelled")
	cmd.Flags().StringVar(&kind, "kind", "", "only jobs of this kind")
	cmd.Flags().StringVar(&tag, "tag", "", "only jobs with this tag")
	cmd.Flags().StringVar(&since, "since", "", "only jobs enqueued at or after this time (RFC 3339, or a duration ago: 1h)")
	cmd.Flags().StringVar(&until, "until", "", "only jobs enqueued before this time (RFC 3339, or a duration ago)")
	cmd.Flags().IntVar(&limit, "limit", 100, "most jobs to list (1..1000)")
	cmd.Flags().Int64Var(&after, "after", 0, "list jobs after this id in the list's order (the last id of the previous page)")
	cmd.Flags().StringVar(&order, "order", string(pgmsg.JobOrderAsc), "asc (oldest first) or desc (newest first)")
	return cmd
}

func newQueueRetry(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "retry JOB_ID",
		Short: "Make a scheduled or retrying job claimable now (it keeps its attempts)",
		Long: `retry makes a job that waits (scheduled for later, or waiting for its retry
backoff) claimable at once and wakes the queue's workers. A running, dead
or finished job is refused: requeue dead jobs with "pgmsg queue dead requeue".`,
		Example: "  pgmsg queue retry 42",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return fmt.Errorf("job id must be a positive integer, got %q", args[0])
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if err := c.RetryJob(cmd.Context(), id); err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"id": id, "state": pgmsg.JobStateAvailable})
			}
			fmt.Fprintf(g.stdout, "job %d is available\n", id)
			return nil
		},
	}
}

// newQueuePause is "queue pause" (pause) or "queue resume".
func newQueuePause(g *globals, pause bool) *cobra.Command {
	use, short, long := "resume QUEUE", "Let a paused queue hand out jobs again",
		"resume lets a paused queue hand out jobs again and wakes its idle workers."
	if pause {
		use, short, long = "pause QUEUE", "Stop a queue from handing out jobs (enqueues go on)",
			`pause stops QUEUE from handing out jobs: workers and claims find none, while
enqueues, retries and schedules go on and running jobs finish. The state is
stored, so it survives restarts; "pgmsg queue stats" shows it, and
"pgmsg queue resume QUEUE" ends it.`
	}
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: "  pgmsg queue " + strings.Fields(use)[0] + " emails",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			set := c.ResumeQueue
			if pause {
				set = c.PauseQueue
			}
			if err := set(cmd.Context(), args[0]); err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"queue": args[0], "paused": pause})
			}
			if pause {
				fmt.Fprintf(g.stdout, "queue %q is paused: it hands out no job until resumed\n", args[0])
			} else {
				fmt.Fprintf(g.stdout, "queue %q hands out jobs\n", args[0])
			}
			return nil
		},
	}
}

func newQueueEnqueue(g *globals) *cobra.Command {
	var (
		p         pgmsg.EnqueueParams
		metadata  string
		dependsOn []int64
	)
	cmd := &cobra.Command{
		Use:   "enqueue QUEUE [PAYLOAD]",
		Short: "Enqueue a job with PAYLOAD, or one job per line of stdin",
		Long: `Enqueue one job with PAYLOAD, or, without it, one job per line of stdin
(all in one transaction). A missing queue is created with default settings
(pgmsg queue create sets others). Payloads are stored as given: JSON is
usual, any bytes are allowed. The job runs once a worker claims it (pgmsg
queue work, a Go, Python or Node worker), no earlier than --delay, higher
--priority first; a failed attempt is retried with backoff until
--max-attempts, then dead (pgmsg queue dead).`,
		Example: `  pgmsg queue enqueue emails '{"to":"a@example.com"}'
  pgmsg queue enqueue emails '{"to":"b@example.com"}' --delay 10m --priority 5
  pgmsg queue enqueue reports '{"day":"2026-01-01"}' --unique-key report-2026-01-01
  pgmsg queue enqueue sync '{"user":42}' --unique-key sync-user-42 --unique-for 1h
  pgmsg queue enqueue sync '{"account":42,"op":"debit"}' --sequence-key account-42
  pgmsg queue enqueue reports '{"merge":true}' --depends-on 41,42
  pgmsg queue enqueue emails '{"to":"c@example.com"}' --tag eu --tag customer:42 --metadata '{"by":"ann"}'
  cat jobs.jsonl | pgmsg queue enqueue emails`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			if metadata != "" {
				p.Metadata = json.RawMessage(metadata)
			}
			if cmd.Flags().Changed("sequence-key") && p.SequenceKey == "" {
				return fmt.Errorf("%w: --sequence-key must be 1 to %d bytes", pgmsg.ErrInvalidArgument, pgmsg.SequenceKeyMaxBytes)
			}
			p.DependsOn = dependsOn
			if cmd.Flags().Changed("limit-key") && p.LimitKey == "" {
				return fmt.Errorf("%w: --limit-key must be 1 to %d bytes", pgmsg.ErrInvalidArgument, pgmsg.LimitKeyMaxBytes)
			}
			if cmd.Flags().Changed("tenant") && p.Tenant == "" {
				return fmt.Errorf("%w: --tenant must be 1 to %d bytes", pgmsg.ErrInvalidTenant, pgmsg.TenantMaxBytes)
			}
			var params []pgmsg.EnqueueParams
			if len(args) == 2 {
				p.Payload = []byte(args[1])
				params = append(params, p)
			} else {
				sc := bufio.NewScanner(g.stdin)
				sc.Buffer(make([]byte, 64<<10), 64<<20)
				for sc.Scan() {
					q := p
					q.Payload = []byte(sc.Text())
					params = append(params, q)
				}
				if err := sc.Err(); err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				if len(params) == 0 {
					return errors.New("no payload: give it as an argument or one per line on stdin")
				}
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := c.EnqueueMany(cmd.Context(), args[0], params, nil)
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(res)
			}
			for _, r := range res {
				switch {
				case r.Duplicate:
					fmt.Fprintf(g.stdout, "job %d already queued with that unique key (%s); nothing added\n", r.ID, r.State)
				case r.State == pgmsg.JobStatePending && len(p.DependsOn) > 0:
					fmt.Fprintf(g.stdout, "enqueued job %d on %q; it waits for its dependencies to complete\n", r.ID, args[0])
				case r.State == pgmsg.JobStateCancelled:
					fmt.Fprintf(g.stdout, "enqueued job %d on %q, cancelled at once: a dependency was cancelled or is dead\n", r.ID, args[0])
				case r.State == pgmsg.JobStatePending && p.SequenceKey != "":
					fmt.Fprintf(g.stdout, "enqueued job %d on %q; it waits behind its sequence %q\n", r.ID, args[0], p.SequenceKey)
				case r.State == pgmsg.JobStatePending:
					fmt.Fprintf(g.stdout, "enqueued job %d on %q; it waits for a place under its key's limit\n", r.ID, args[0])
				case r.State == pgmsg.JobStateScheduled:
					fmt.Fprintf(g.stdout, "enqueued job %d on %q, runs at %s\n", r.ID, args[0], r.RunAt.UTC().Format(time.RFC3339))
				default:
					fmt.Fprintf(g.stdout, "enqueued job %d on %q\n", r.ID, args[0])
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Kind, "kind", "", "job kind, for handlers to dispatch on")
	f.DurationVar(&p.Delay, "delay", 0, "run no earlier than this from now, e.g. 10m")
	f.IntVar(&p.Priority, "priority", 0, "higher runs first (-32768..32767)")
	f.StringVar(&p.UniqueKey, "unique-key", "", "skip the job if a live job of the queue has this key")
	f.DurationVar(&p.UniqueFor, "unique-for", 0, "with --unique-key: one job per key in each window of this length (e.g. 1h), whatever became of it")
	f.IntVar(&p.MaxAttempts, "max-attempts", 0, "attempts before dead-letter (default: the queue's)")
	f.DurationVar(&p.Timeout, "timeout", 0, "longest a worker runs this job (default: the queue's --job-timeout)")
	f.StringArrayVar(&p.Tags, "tag", nil, "label the job for search (repeat for more; see queue jobs --tag)")
	f.StringVar(&metadata, "metadata", "", "a JSON object kept with the job")
	f.StringVar(&p.SequenceKey, "sequence-key", "", "run the job after the queue's earlier jobs of this key, one at a time (1 to 200 bytes)")
	f.BoolVar(&p.SequenceContinue, "sequence-continue", false, "with --sequence-key: if the job goes dead or is cancelled, the sequence goes on instead of waiting (queue resume-sequence)")
	f.StringVar(&p.LimitKey, "limit-key", "", "the job's key for the queue's --key-limit, instead of its payload's --key-field (1 to 200 bytes)")
	f.StringVar(&p.Tenant, "tenant", "", "the job's tenant: its queue serves tenants by weight (fair share; see queue tenants)")
	f.Int64SliceVar(&dependsOn, "depends-on", nil, "run the job once these jobs of the queue completed (ids, comma-separated or repeated; see queue workflow)")
	f.BoolVar(&p.IgnoreCancelledDeps, "ignore-cancelled-deps", false, "with --depends-on: a cancelled or deleted dependency counts as done instead of cancelling the job")
	f.BoolVar(&p.IgnoreDeadDeps, "ignore-dead-deps", false, "with --depends-on: a dead dependency counts as done instead of cancelling the job")
	return cmd
}

// consoleJob is how work prints a job: one JSON object per line.
type consoleJob struct {
	ID       int64           `json:"id"`
	Queue    string          `json:"queue"`
	Kind     string          `json:"kind,omitempty"`
	Attempt  int             `json:"attempt"`
	Payload  json.RawMessage `json:"payload"`
	Encoding string          `json:"payload_encoding,omitempty"`
	Enqueued string          `json:"enqueued_at"`
}

// workPollInterval is how often `queue work --follow` checks for jobs when
// no notification wakes it.
const workPollInterval = pgmsg.PollIntervalDefault

func newQueueWork(g *globals) *cobra.Command {
	var max int
	var follow bool
	var encoding string
	cmd := &cobra.Command{
		Use:   "work QUEUE",
		Short: "Claim jobs, print each as a JSON line and complete it",
		Long: `work claims jobs of QUEUE, prints each as one JSON line
{"id","queue","kind","attempt","payload","enqueued_at"} and completes it once
printed: a terminal worker for trying things out and for draining a queue into
another tool. Without --follow it stops when no job is claimable.`,
		Example: `  pgmsg queue work emails
  pgmsg queue work emails --follow --max 100 | jq .payload`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if max < 0 {
				return fmt.Errorf("--max must not be negative, got %d", max)
			}
			ctx := cmd.Context()
			var ride *outage
			if follow {
				ride = &outage{stderr: g.stderr}
			}
			c, done, err := g.connect(ctx, ride)
			if err != nil {
				if follow && ctx.Err() != nil {
					return nil // Ctrl-C
				}
				return err
			}
			defer done()
			queue := args[0]
			// --follow waits for enqueue notifications, subscribed before
			// the first claim so that none is missed, and checks again every
			// second anyway (lost notifications, delayed and retried jobs
			// becoming due).
			var wake <-chan struct{}
			if follow {
				var unsubscribe func()
				wake, unsubscribe = c.JobWakeups(queue)
				defer unsubscribe()
			}
			enc := json.NewEncoder(g.stdout)
			worked := 0
			for max == 0 || worked < max {
				n := 100
				if max > 0 {
					n = min(n, max-worked)
				}
				jobs, err := c.ClaimJobs(ctx, queue, &pgmsg.ClaimJobsOpts{Max: n, Worker: "pgmsg-cli",
					MaxBytes: wire.MaxAnswerBytesDefault})
				if err != nil {
					if follow && ctx.Err() != nil {
						return nil
					}
					if !follow {
						return err
					}
					if err := ride.wait(ctx, err); err != nil {
						if ctx.Err() != nil {
							return nil
						}
						return err
					}
					continue
				}
				ride.over()
				if len(jobs) == 0 {
					if !follow {
						break
					}
					t := time.NewTimer(workPollInterval)
					select {
					case <-ctx.Done():
						t.Stop()
						return nil
					case <-wake:
					case <-t.C:
					}
					t.Stop()
					continue
				}
				for _, j := range jobs {
					jj := wire.EncodeJob(j, encoding)
					out := consoleJob{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Attempt: j.Attempt, Payload: jj.Payload,
						Enqueued: j.EnqueuedAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00")}
					if jj.PayloadEncoding == wire.EncodingBase64 && encoding != wire.EncodingBase64 {
						out.Encoding = jj.PayloadEncoding
					}
					if err := enc.Encode(out); err != nil {
						return err
					}
				}
				var res *pgmsg.CompleteManyResult
				for {
					res, err = c.CompleteMany(context.WithoutCancel(ctx), jobs)
					if err == nil || !follow || ride.wait(ctx, err) != nil {
						break
					}
				}
				ride.over()
				if err != nil {
					return fmt.Errorf("jobs printed but not completed (they will run again): %w", err)
				}
				if len(res.NotHeld) > 0 {
					fmt.Fprintf(g.stderr, "pgmsg: %d jobs were no longer held when completed (lease expired): %v\n", len(res.NotHeld), res.NotHeld)
				}
				worked += len(jobs)
			}
			if worked == 0 && !follow {
				fmt.Fprintf(g.stderr, "pgmsg: no claimable jobs on %q\n", queue)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&max, "max", "n", 0, "stop after N jobs (0: no limit)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep waiting for new jobs until Ctrl-C")
	cmd.Flags().StringVar(&encoding, "encoding", wire.EncodingAuto, "payload format: auto, json, text or base64")
	return cmd
}

func newQueueStats(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stats [QUEUE]",
		Short: "Job counts by state, per queue",
		Example: `  pgmsg queue stats
  pgmsg queue stats emails -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var st []*pgmsg.QueueStats
			if len(args) == 1 {
				one, err := c.QueueStats(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				st = []*pgmsg.QueueStats{one}
			} else if st, err = c.AllQueueStats(cmd.Context()); err != nil {
				return err
			}
			if js {
				if st == nil {
					st = []*pgmsg.QueueStats{}
				}
				return g.printJSON(st)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "QUEUE\tAVAILABLE\tSCHEDULED\tRUNNING\tRETRYING\tDEAD\tARCHIVED\tOLDEST WAITING")
			for _, s := range st {
				name := s.Queue
				if s.Paused {
					name += " (paused)"
				}
				oldest := "-" // nothing waiting: no age, not zero
				if s.Available > 0 {
					oldest = s.OldestAvailableAge.Round(time.Second).String()
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", name, s.Available, s.Scheduled, s.Running, s.Retrying,
					s.Dead, s.Archived, oldest)
			}
			if len(st) == 0 {
				fmt.Fprintln(w, "(no queues)")
			}
			return w.Flush()
		},
	}
}

func newQueueDead(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, requeue or purge dead-letter jobs",
	}
	var limit int
	list := &cobra.Command{
		Use:     "list QUEUE",
		Short:   "List dead jobs with their last error",
		Example: "  pgmsg queue dead list emails -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if _, err := c.QueueStats(cmd.Context(), args[0]); err != nil {
				return err
			}
			jobs, err := c.ListDeadJobs(cmd.Context(), args[0], &pgmsg.DeadJobsOpts{Limit: limit})
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(wire.EncodeJobs(jobs, wire.EncodingAuto))
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tKIND\tATTEMPTS\tDIED\tLAST ERROR")
			for _, j := range jobs {
				last := "-"
				if len(j.Errors) > 0 {
					last = j.Errors[len(j.Errors)-1].Error
				}
				fmt.Fprintf(w, "%d\t%s\t%d/%d\t%s\t%s\n", j.ID, dash(j.Kind), j.Attempt, j.MaxAttempts, fmtTime(j.FinishedAt), last)
			}
			if len(jobs) == 0 {
				fmt.Fprintln(w, "(no dead jobs)")
			}
			return w.Flush()
		},
	}
	list.Flags().IntVar(&limit, "limit", 100, "most jobs to list")
	cmd.AddCommand(list)

	for _, verb := range []string{"requeue", "purge"} {
		var ids []int64
		var kind string
		var olderThan time.Duration
		short := "Make dead jobs available again, attempts reset (all, or --id ...)"
		example := "  pgmsg queue dead requeue emails\n  pgmsg queue dead requeue emails --id 42 --id 43"
		if verb == "purge" {
			short = "Delete dead jobs for good (all, --id ..., or --older-than)"
			example = "  pgmsg queue dead purge emails --older-than 720h\n  pgmsg queue dead purge emails --id 42"
		}
		c := &cobra.Command{
			Use:     verb + " QUEUE",
			Short:   short,
			Example: example,
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				js, err := g.jsonOutput()
				if err != nil {
					return err
				}
				c, done, err := g.client(cmd.Context())
				if err != nil {
					return err
				}
				defer done()
				if _, err := c.QueueStats(cmd.Context(), args[0]); err != nil {
					return err
				}
				opts := &pgmsg.DeadJobsOpts{IDs: ids, Kind: kind, OlderThan: olderThan}
				var n int64
				if verb == "requeue" {
					n, err = c.RequeueDeadJobs(cmd.Context(), args[0], opts)
				} else {
					n, err = c.PurgeDeadJobs(cmd.Context(), args[0], opts)
				}
				if err != nil {
					return err
				}
				if js {
					return g.printJSON(map[string]any{"queue": args[0], verb + "d": n})
				}
				fmt.Fprintf(g.stdout, "%sd %s of %q\n", verb, plural(int(n), "dead job"), args[0])
				return nil
			},
		}
		c.Flags().Int64SliceVar(&ids, "id", nil, "only these job ids (repeatable)")
		c.Flags().StringVar(&kind, "kind", "", "only jobs of this kind")
		if verb == "purge" {
			c.Flags().DurationVar(&olderThan, "older-than", 0, "only jobs dead for longer than this")
		}
		cmd.AddCommand(c)
	}
	return cmd
}
