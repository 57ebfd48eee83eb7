package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pgmsg/pgmsg"
)

// queueConfigFlags binds a QueueConfig's settings to flags. apply fills
// cfg from the flags the user set: on update, --max-depth 0 removes the
// limit, --backpressure-timeout 0 refuses at once and --job-timeout 0
// removes the queue's job timeout (the zero values of QueueConfig mean
// "unchanged" / "default").
func queueConfigFlags(fs *pflag.FlagSet, cfg *pgmsg.QueueConfig) (apply func()) {
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", 0, "attempts a job gets before it is dead (default 25)")
	fs.DurationVar(&cfg.Lease, "lease", 0, "visibility timeout of a claimed job (default 30s)")
	fs.DurationVar(&cfg.RetryBackoff, "retry-backoff", 0, "wait before the first retry, doubling each time (default 1s)")
	fs.DurationVar(&cfg.RetryBackoffMax, "retry-backoff-max", 0, "longest wait between retries (default 1h)")
	fs.DurationVar(&cfg.ArchiveRetention, "archive-retention", 0, "how long finished jobs stay in the archive (default 168h)")
	fs.IntVar(&cfg.MaxPayloadBytes, "max-payload-bytes", 0, "largest payload accepted (default 1 MiB)")
	fs.Int64Var(&cfg.MaxDepth, "max-depth", 0, "most jobs waiting or running; enqueues beyond it fail with queue_full (0: no limit)")
	fs.DurationVar(&cfg.BackpressureTimeout, "backpressure-timeout", 0, "how long an enqueue waits for room under --max-depth (default 5s; 0 with the flag given: refuse at once)")
	fs.DurationVar(&cfg.JobTimeout, "job-timeout", 0, "longest a worker runs one job before cancelling it (default: none; 0 on config: remove)")
	fs.DurationVar(&cfg.DeadRetention, "dead-retention", 0, "how long dead jobs are kept before maintenance deletes them (default: until acted on; 0 on config: keep again)")
	fs.Float64Var(&cfg.RateLimit, "rate-limit", 0, "most jobs handed out per second to all workers together, in bursts of a second's worth (default: none; 0 on config: remove)")
	fs.IntVar(&cfg.MaxRunning, "max-running", 0, "most jobs running at once across every worker process (default: none; 0 on config: remove)")
	fs.IntVar(&cfg.KeyLimit, "key-limit", 0, "most jobs of one limit key waiting to run or running at once, across every worker process; the others wait as pending (default: none; 0 on config: remove, with --key-field)")
	fs.StringVar(&cfg.KeyField, "key-field", "", "top-level field of the jobs' JSON payloads whose value is their limit key, for jobs enqueued without --limit-key (needs --key-limit; \"\" on config: remove)")
	return func() {
		if fs.Changed("key-limit") && cfg.KeyLimit == 0 {
			cfg.KeyLimit = pgmsg.QueueKeyLimitNone
		}
		if fs.Changed("key-field") && cfg.KeyField == "" {
			cfg.KeyField = pgmsg.QueueKeyFieldNone
		}
		if fs.Changed("rate-limit") && cfg.RateLimit == 0 {
			cfg.RateLimit = pgmsg.QueueRateLimitNone
		}
		if fs.Changed("max-running") && cfg.MaxRunning == 0 {
			cfg.MaxRunning = pgmsg.QueueMaxRunningNone
		}
		if fs.Changed("dead-retention") && cfg.DeadRetention == 0 {
			cfg.DeadRetention = pgmsg.QueueDeadRetentionNone
		}
		if fs.Changed("job-timeout") && cfg.JobTimeout == 0 {
			cfg.JobTimeout = pgmsg.QueueJobTimeoutNone
		}
		if fs.Changed("max-depth") && cfg.MaxDepth == 0 {
			cfg.MaxDepth = pgmsg.QueueMaxDepthNone
		}
		if fs.Changed("backpressure-timeout") && cfg.BackpressureTimeout == 0 {
			cfg.BackpressureTimeout = pgmsg.QueueBackpressureNoWait
		}
	}
}

func newQueueCreate(g *globals) *cobra.Command {
	var cfg pgmsg.QueueConfig
	cmd := &cobra.Command{
		Use:   "create QUEUE",
		Short: "Create a queue with its settings (queues are also created by their first enqueue)",
		Example: `  pgmsg queue create emails --max-attempts 5 --lease 1m
  pgmsg queue create reports --max-depth 10000 --backpressure-timeout 2s
  pgmsg queue create emails --rate-limit 50 --max-running 10
  pgmsg queue create emails --key-limit 2 --key-field customer_id`,
		Args: cobra.ExactArgs(1),
	}
	apply := queueConfigFlags(cmd.Flags(), &cfg)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		apply()
		if cfg.MaxDepth == pgmsg.QueueMaxDepthNone {
			cfg.MaxDepth = 0 // no limit is the default of a new queue
		}
		if cfg.RateLimit == pgmsg.QueueRateLimitNone {
			cfg.RateLimit = 0
		}
		if cfg.MaxRunning == pgmsg.QueueMaxRunningNone {
			cfg.MaxRunning = 0
		}
		if cfg.KeyLimit == pgmsg.QueueKeyLimitNone {
			cfg.KeyLimit = 0
		}
		if cfg.KeyField == pgmsg.QueueKeyFieldNone {
			cfg.KeyField = ""
		}
		c, done, err := g.client(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		q, err := c.CreateQueue(cmd.Context(), args[0], cfg)
		return g.printQueue(err, q, fmt.Sprintf("created queue %q\n", args[0]))
	}
	return cmd
}

func newQueueConfig(g *globals) *cobra.Command {
	var cfg pgmsg.QueueConfig
	cmd := &cobra.Command{
		Use:   "config QUEUE",
		Short: "Show a queue's settings, or change those given as flags",
		Example: `  pgmsg queue config emails
  pgmsg queue config emails --max-depth 50000 --backpressure-timeout 0
  pgmsg queue config emails --max-depth 0      # remove the limit`,
		Args: cobra.ExactArgs(1),
	}
	apply := queueConfigFlags(cmd.Flags(), &cfg)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		apply()
		c, done, err := g.client(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		if cfg != (pgmsg.QueueConfig{}) {
			q, err := c.UpdateQueue(cmd.Context(), args[0], cfg)
			return g.printQueue(err, q, "")
		}
		qs, err := c.ListQueues(cmd.Context())
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.Name == args[0] {
				return g.printQueue(nil, q, "")
			}
		}
		_, err = c.QueueStats(cmd.Context(), args[0]) // the API's own unknown-queue error
		if err == nil {
			err = fmt.Errorf("%w: queue %q was deleted meanwhile", pgmsg.ErrUnknownQueue, args[0])
		}
		return err
	}
	return cmd
}

func newQueueList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List queues with their settings",
		Long: `List every queue with the settings people set: attempts, lease, job
timeout, depth, rate and concurrency limits ("-" where none is set). -o wide
adds the retry backoff, the archive's and dead jobs' retention, the payload
limit and the backpressure wait; -o json has every field. pgmsg queue stats
shows the jobs in each state.`,
		Example: "  pgmsg queue list\n  pgmsg queue list -o wide\n  pgmsg queue list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			qs, err := c.ListQueues(cmd.Context())
			if qs == nil {
				qs = []*pgmsg.Queue{}
			}
			return g.printQueues(err, qs, "")
		},
	}
}

func newQueueDelete(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "delete QUEUE",
		Aliases: []string{"rm"},
		Short:   "Delete a queue and its archive (--force: with its live and dead jobs)",
		Long: `Delete a queue with its archive of finished jobs and its periodic jobs. A
queue that still has jobs waiting, running or dead is refused (PM108
queue_not_empty) unless --force, which deletes them too; a worker holding
one of them then fails to complete it.`,
		Example: "  pgmsg queue delete scratch\n  pgmsg queue delete emails --force",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if err := c.DeleteQueue(cmd.Context(), args[0], force); err != nil {
				return err
			}
			if js, err := g.jsonOutput(); err != nil || js {
				return g.orJSON(err, map[string]any{"deleted": args[0]})
			}
			fmt.Fprintf(g.stdout, "deleted queue %q\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "also delete the queue's waiting, running and dead jobs")
	return cmd
}

// printQueue prints one queue (create, config) as a JSON object or a
// table, after an optional header line; err, if set, is returned instead.
func (g *globals) printQueue(err error, q *pgmsg.Queue, header string) error {
	if err != nil {
		return err
	}
	if js, err := g.jsonOutput(); err != nil || js {
		return g.orJSON(err, q)
	}
	return g.printQueues(nil, []*pgmsg.Queue{q}, header)
}

// printQueues prints queues (list) as a JSON array, whatever their number,
// or a table, after an optional header line; err, if set, is returned
// instead.
func (g *globals) printQueues(err error, qs []*pgmsg.Queue, header string) error {
	if err != nil {
		return err
	}
	if js, err := g.jsonOutput(); err != nil || js {
		return g.orJSON(err, qs)
	}
	fmt.Fprint(g.stdout, header)
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	// The limits people set fit 100 columns; -o wide adds the retry and
	// retention settings (as kubectl's -o wide does).
	wide := g.output == "wide"
	if wide {
		fmt.Fprintln(w, "QUEUE\tMAX ATTEMPTS\tLEASE\tJOB TIMEOUT\tMAX DEPTH\tRATE LIMIT\tMAX RUNNING\tRETRY BACKOFF\tBACKOFF MAX\tARCHIVE KEPT\tDEAD KEPT\tMAX PAYLOAD\tBACKPRESSURE WAIT\tPER KEY")
	} else {
		fmt.Fprintln(w, "QUEUE\tMAX ATTEMPTS\tLEASE\tJOB TIMEOUT\tMAX DEPTH\tRATE LIMIT\tMAX RUNNING")
	}
	for _, q := range qs {
		depth := "-"
		if q.MaxDepth > 0 {
			depth = fmt.Sprint(q.MaxDepth)
		}
		wait := shortDuration(q.BackpressureTimeout)
		if q.BackpressureTimeout < 0 {
			wait = "- (refuse)"
		}
		timeout := "-"
		if q.JobTimeout > 0 {
			timeout = shortDuration(q.JobTimeout)
		}
		kept := "until acted on"
		if q.DeadRetention > 0 {
			kept = shortDuration(q.DeadRetention)
		}
		rate, running := "-", "-"
		if q.RateLimit > 0 {
			rate = fmt.Sprintf("%g/s", q.RateLimit)
		}
		if q.MaxRunning > 0 {
			running = fmt.Sprint(q.MaxRunning)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s", q.Name, q.MaxAttempts, shortDuration(q.Lease), timeout, depth, rate, running)
		if wide {
			fmt.Fprintf(w, "\t%s\t%s\t%s\t%s\t%d\t%s\t%s", shortDuration(q.RetryBackoff), shortDuration(q.RetryBackoffMax),
				shortDuration(q.ArchiveRetention.Round(time.Hour)), kept, q.MaxPayloadBytes, wait, perKey(q))
		}
		fmt.Fprintln(w)
	}
	if len(qs) == 0 {
		fmt.Fprintln(w, "(no queues)")
	}
	return w.Flush()
}

// perKey describes q's per-key limit: "-", "2" (keys given at enqueue)
// or "2 by customer_id".
func perKey(q *pgmsg.Queue) string {
	switch {
	case q.KeyLimit == 0:
		return "-"
	case q.KeyField == "":
		return fmt.Sprint(q.KeyLimit)
	}
	return fmt.Sprintf("%d by %s", q.KeyLimit, q.KeyField)
}

// shortDuration prints d without its zero tails: 1h, 90s, 168h, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
