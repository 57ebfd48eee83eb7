package cli

import (
	"fmt"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
)

func newMaintenance(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "maintenance",
		Short: "Run retention, group expiry, compaction, segment creation and queue upkeep",
		Long: `Maintenance keeps the log and the queues healthy: it drops segments past
retention (never DELETE), expires abandoned consumer groups, compacts
compacted topics, creates segments ahead of need, rescues expired job leases
and prunes the job archive. "pgmsg serve" runs it as an elected leader;
this command runs it by hand or as a dedicated leader process.`,
	}
	var once bool
	var interval, groupTTL time.Duration
	run := &cobra.Command{
		Use:   "run",
		Short: "Run maintenance (as the elected leader, or once with --once)",
		Example: `  pgmsg maintenance run --once
  pgmsg maintenance run --interval 10s     # takes part in leader election until Ctrl-C`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			client, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			cfg := &pgmsg.MaintenanceConfig{Interval: interval, GroupTTL: groupTTL}
			if !once {
				fmt.Fprintln(g.stderr, "pgmsg: taking part in maintenance leader election; Ctrl-C to stop")
				err := client.RunMaintenance(cmd.Context(), cfg)
				if cmd.Context().Err() != nil {
					return nil
				}
				return err
			}
			res, err := client.MaintainOnce(cmd.Context(), cfg)
			if res != nil {
				if js {
					if perr := g.printJSON(res); perr != nil {
						return perr
					}
				} else {
					names := make([]string, 0, len(res.Tasks))
					for n := range res.Tasks {
						names = append(names, n)
					}
					sort.Strings(names)
					w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "TASK\tITEMS\tDURATION\tERROR")
					for _, n := range names {
						t := res.Tasks[n]
						fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", n, t.Items, t.Duration.Round(time.Microsecond), t.Error)
					}
					if ferr := w.Flush(); ferr != nil {
						return ferr
					}
				}
			}
			return err
		},
	}
	run.Flags().BoolVar(&once, "once", false, "run every task once now and exit")
	run.Flags().DurationVar(&interval, "interval", pgmsg.MaintenanceIntervalDefault, "time between runs")
	run.Flags().DurationVar(&groupTTL, "group-ttl", pgmsg.GroupTTLDefault, "expire groups idle this long (unless the topic sets group_ttl_ms)")
	cmd.AddCommand(run)

	var limit int
	var kind string
	events := &cobra.Command{
		Use:     "events",
		Short:   "List recent retention drops, skips, group expiries and compactions",
		Example: "  pgmsg maintenance events --kind retention_skip",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			client, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			ev, err := client.MaintenanceEvents(cmd.Context(), kind, limit)
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(ev)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "AT\tKIND\tTOPIC\tGROUP\tPARTITION\tDETAIL")
			for _, e := range ev {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%v\n", e.At.UTC().Format(time.RFC3339), e.Kind, e.Topic, e.Group, e.Partition, e.Detail)
			}
			return w.Flush()
		},
	}
	events.Flags().IntVar(&limit, "limit", 50, "number of events")
	events.Flags().StringVar(&kind, "kind", "", "only events of this kind (retention_drop, retention_skip, group_expired, compacted, log_epoch)")
	cmd.AddCommand(events)
	cmd.AddCommand(newMinInsyncReplicas(g))
	return cmd
}

// newMinInsyncReplicas shows or sets the schema's min_insync_replicas
// (Client.SetMinInsyncReplicas; docs/operations.md, "Refusing writes
// without a synchronous standby").
func newMinInsyncReplicas(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "min-insync-replicas [1|2]",
		Short: "Show or set the guard that refuses writes PostgreSQL would commit without a synchronous standby",
		Long: `Without an argument, prints the schema's min_insync_replicas. With 2,
publishes, enqueues, job completions and cancels and offset commits are
refused (PM124 not_enough_replicas, nothing written) unless the session's
synchronous_commit is on, remote_write or remote_apply and
synchronous_standby_names is not empty; 1 (the default) turns the guard off.
Setting it needs the schema's owner.`,
		Example: "  pgmsg maintenance min-insync-replicas 2",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			set := 0
			if len(args) == 1 {
				if set, err = strconv.Atoi(args[0]); err != nil || (set != 1 && set != 2) {
					return fmt.Errorf("min-insync-replicas: want 1 (no guard) or 2 (writes need a synchronous standby), got %q", args[0])
				}
			}
			client, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if set != 0 {
				if err := client.SetMinInsyncReplicas(cmd.Context(), set); err != nil {
					return err
				}
			}
			n, err := client.MinInsyncReplicas(cmd.Context())
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]int{"min_insync_replicas": n})
			}
			fmt.Fprintln(g.stdout, n)
			return nil
		},
	}
}
