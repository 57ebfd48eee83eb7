package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func newQueuePeriodic(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "periodic",
		Short: "List, add and remove periodic jobs (cron schedules and fixed intervals)",
		Long: `A periodic job enqueues a job on a schedule: five cron fields (minute hour
day-of-month month day-of-week), @hourly, @daily, @weekly, @monthly,
@yearly, or @every <interval>, read in a time zone. The maintenance leader
(pgmsg serve, pgmsg maintenance run) enqueues each tick once, whichever
process leads; ticks missed while none ran are coalesced into one job.`,
	}
	cmd.AddCommand(newQueuePeriodicList(g), newQueuePeriodicAdd(g), newQueuePeriodicRemove(g))
	return cmd
}

func newQueuePeriodicList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list [QUEUE]",
		Short:   "List the periodic jobs of a queue, or of every queue",
		Example: "  pgmsg queue periodic list\n  pgmsg queue periodic list reports -o json",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			queue := ""
			if len(args) == 1 {
				queue = args[0]
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			list, err := c.ListPeriodicJobs(cmd.Context(), queue)
			if err != nil {
				return err
			}
			if js {
				out := make([]wire.PeriodicJobJSON, len(list))
				for i, p := range list {
					out[i] = wire.EncodePeriodicJob(p, wire.EncodingAuto)
				}
				return g.printJSON(out)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "QUEUE\tNAME\tSCHEDULE\tTIME ZONE\tKIND\tNEXT RUN\tLAST RUN\tLAST JOB\tLAST ERROR")
			for _, p := range list {
				last, job := "-", "-"
				if !p.LastRunAt.IsZero() {
					last = fmtTime(&p.LastRunAt)
					job = fmt.Sprint(p.LastJobID)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Queue, p.Name, p.Schedule, p.TimeZone, dash(p.Kind),
					fmtTime(&p.NextRunAt), last, job, dash(p.LastError))
			}
			if len(list) == 0 {
				fmt.Fprintln(w, "(no periodic jobs)")
			}
			return w.Flush()
		},
	}
}

func newQueuePeriodicAdd(g *globals) *cobra.Command {
	var (
		p        pgmsg.PeriodicJob
		payload  string
		metadata string
		preview  int
	)
	cmd := &cobra.Command{
		Use:   "add QUEUE NAME SCHEDULE",
		Short: "Add a periodic job, or replace the one of that name",
		Long: `add stores a periodic job: each tick of SCHEDULE enqueues --payload (with
the job settings given) on QUEUE. Adding the same definition again changes
nothing; a changed one starts its schedule from now. --preview N shows the
next N ticks after adding.`,
		Example: `  pgmsg queue periodic add reports nightly '0 2 * * *' --payload '{"report":"daily"}' --kind report
  pgmsg queue periodic add reports weekday-9am '0 9 * * MON-FRI' --time-zone Europe/Paris
  pgmsg queue periodic add health ping '@every 30s' --run-on-start --preview 3`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			if preview < 0 || preview > 1000 {
				return fmt.Errorf("--preview must be from 0 to 1000, got %d", preview)
			}
			p.Queue, p.Name, p.Schedule = args[0], args[1], args[2]
			p.Payload = []byte(payload)
			if metadata != "" {
				p.Metadata = json.RawMessage(metadata)
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			out, err := c.AddPeriodicJob(cmd.Context(), p)
			if errors.Is(err, pgmsg.ErrUnknownQueue) {
				// Unlike enqueue, a schedule does not create its queue:
				// a typo would otherwise start a queue nobody works.
				return fmt.Errorf("%s: create the queue first (pgmsg queue create %s)", oneLine(err), p.Queue)
			}
			if err != nil {
				return err
			}
			var ticks []time.Time
			if preview > 0 {
				// The stored job's own ticks: the first is NextRunAt (now,
				// with --run-on-start), then the schedule's from there.
				ticks = []time.Time{out.NextRunAt}
				if preview > 1 {
					more, err := c.PreviewSchedule(cmd.Context(), out.Schedule, out.TimeZone, out.NextRunAt, preview-1)
					if err != nil {
						return err
					}
					ticks = append(ticks, more...)
				}
			}
			if js {
				return g.printJSON(map[string]any{"periodic_job": wire.EncodePeriodicJob(out, wire.EncodingAuto), "next_ticks": utcTimes(ticks)})
			}
			fmt.Fprintf(g.stdout, "periodic job %q on %q: %s (%s), next run %s\n", out.Name, out.Queue, out.Schedule, out.TimeZone,
				fmtTime(&out.NextRunAt))
			for _, t := range ticks {
				fmt.Fprintf(g.stdout, "  %s\n", t.UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.TimeZone, "time-zone", "UTC", "IANA time zone of the cron fields, e.g. Europe/Paris")
	f.StringVar(&payload, "payload", "", "payload of each job")
	f.StringVar(&p.Kind, "kind", "", "job kind, for handlers to dispatch on")
	f.IntVar(&p.Priority, "priority", 0, "higher runs first (-32768..32767)")
	f.IntVar(&p.MaxAttempts, "max-attempts", 0, "attempts before dead-letter (default: the queue's)")
	f.DurationVar(&p.Timeout, "timeout", 0, "longest a worker runs each job (default: the queue's --job-timeout)")
	f.StringArrayVar(&p.Tags, "tag", nil, "label each job for search (repeat for more)")
	f.StringVar(&metadata, "metadata", "", "a JSON object kept with each job")
	f.BoolVar(&p.RunOnStart, "run-on-start", false, "enqueue a job at once, then follow the schedule")
	f.IntVar(&preview, "preview", 0, "print the next N ticks")
	return cmd
}

func utcTimes(ts []time.Time) []time.Time {
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = t.UTC()
	}
	return out
}

func newQueuePeriodicRemove(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "remove QUEUE NAME",
		Short:   "Remove a periodic job (the jobs it enqueued stay)",
		Example: "  pgmsg queue periodic remove reports nightly",
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
			if err := c.RemovePeriodicJob(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"queue": args[0], "name": args[1], "removed": true})
			}
			fmt.Fprintf(g.stdout, "removed periodic job %q from %q\n", args[1], args[0])
			return nil
		},
	}
}
