package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func newGroup(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List consumer groups with their lag, reset or delete them, list and replay their dead letters",
		Long: `A consumer group keeps one cursor per partition of a topic: the next offset it
reads. Lag is how many records are past the cursor. Groups are created by their
first consume.`,
	}
	var perPartition bool
	list := &cobra.Command{
		Use:     "list [TOPIC]",
		Aliases: []string{"ls"},
		Short:   "List groups with their lag: one row per group, or per partition of a TOPIC",
		Long: `Without TOPIC, one row per group (as kafka-consumer-groups --list): its
partitions, their lag summed, how many have a live claim and its latest commit;
the answer grows with the groups, not their partitions. With TOPIC, or with
--partitions, one row per group and partition with its cursor, end and lag,
then each group's total lag. pgmsg group describe GROUP shows one group's
partitions on every topic it reads.`,
		Example: `  pgmsg group list
  pgmsg group list --partitions
  pgmsg group list orders -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := ""
			if len(args) == 1 {
				topic = args[0]
			}
			if topic == "" && !perPartition {
				return g.listGroupSummaries(cmd)
			}
			return g.listGroups(cmd, topic)
		},
	}
	list.Flags().BoolVar(&perPartition, "partitions", false, "one row per group and partition (the default with TOPIC)")
	cmd.AddCommand(list)
	var describeTopic string
	describe := &cobra.Command{
		Use:   "describe GROUP",
		Short: "Show a group's members, cursors, owners, lag and live claims on each topic it reads",
		Example: `  pgmsg group describe billing
  pgmsg group describe billing --topic orders -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.describeGroup(cmd, describeTopic, args[0])
		},
	}
	describe.Flags().StringVar(&describeTopic, "topic", "", "only this topic")
	cmd.AddCommand(describe)

	var to string
	var partition int32
	reset := &cobra.Command{
		Use:   "reset GROUP TOPIC --to earliest|latest|OFFSET|TIME",
		Short: "Move a group's cursors (replay or skip); live claims end",
		Example: `  pgmsg group reset billing orders --to earliest
  pgmsg group reset billing orders --to 2026-01-02T15:04:05Z
  pgmsg group reset billing orders --to 2h        # the first records of the last two hours
  pgmsg group reset billing orders --to 42 --partition 0`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return errors.New("--to is required: earliest, latest, an offset, an RFC 3339 time or a duration ago (90m)")
			}
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var p *int32
			if cmd.Flags().Changed("partition") {
				p = &partition
			}
			gs, err := c.ResetGroup(cmd.Context(), args[1], args[0], to, p)
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(gs)
			}
			fmt.Fprintf(g.stdout, "reset group %q on %q to %s:\n", args[0], args[1], to)
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PARTITION\tCURSOR\tEND\tLAG")
			for _, gp := range gs {
				fmt.Fprintf(w, "%d\t%d\t%d\t%d\n", gp.Partition, gp.NextOffset, gp.EndOffset, gp.Lag)
			}
			return w.Flush()
		},
	}
	reset.Flags().StringVar(&to, "to", "", "earliest, latest, an offset, an RFC 3339 time or a duration ago (90m)")
	reset.Flags().Int32Var(&partition, "partition", 0, "reset only this partition")
	cmd.AddCommand(reset)

	cmd.AddCommand(&cobra.Command{
		Use:     "delete GROUP TOPIC",
		Aliases: []string{"rm"},
		Short:   "Delete a group's cursors on a topic",
		Example: "  pgmsg group delete billing orders",
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
			ok, err := c.DeleteGroup(cmd.Context(), args[1], args[0])
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("unknown group %q on topic %q", args[0], args[1])
			}
			if js {
				return g.printJSON(map[string]any{"deleted": args[0], "topic": args[1]})
			}
			fmt.Fprintf(g.stdout, "deleted group %q on %q\n", args[0], args[1])
			return nil
		},
	})
	cmd.AddCommand(newGroupDLQ(g))
	return cmd
}

// newGroupDLQ is `pgmsg group dlq`: the records a group set aside
// (pgmsg.ConsumerOpts.MaxDeliveries).
func newGroupDLQ(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List and replay the records a group set aside in its dead-letter topic",
		Long: `A consumer with MaxDeliveries sets aside the records its handler kept failing
on, in the dead-letter topic (default TOPIC.dlq), with headers naming the
source partition, offset, group and last error, and moves on. "dlq list"
shows a group's dead letters; "dlq replay" publishes them back to TOPIC, each
once, for that group only (other groups' consumers commit past them).`,
	}
	var opts pgmsg.DeadLettersOpts
	var encoding string
	list := &cobra.Command{
		Use:     "list GROUP TOPIC",
		Aliases: []string{"ls"},
		Short:   "List a group's dead letters of a topic",
		Example: `  pgmsg group dlq list billing orders
  pgmsg group dlq list billing orders -o json --encoding text`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			if err := checkEncoding(encoding); err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			dl, err := c.DeadLetters(cmd.Context(), args[1], args[0], &opts)
			if err != nil {
				return err
			}
			if js {
				out := make([]wire.DeadLetterJSON, len(dl))
				for i, d := range dl {
					out[i] = wire.EncodeDeadLetter(d, encoding)
				}
				return g.printJSON(out)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PARTITION\tOFFSET\tDELIVERIES\tREPLAYED\tSET ASIDE AT\tERROR")
			for _, d := range dl {
				fmt.Fprintf(w, "%d\t%d\t%d\t%t\t%s\t%s\n", d.Partition, d.Offset, d.Deliveries, d.Replayed,
					d.Record.Timestamp.UTC().Format(time.RFC3339), shorten(d.Error, 80))
			}
			return w.Flush()
		},
	}
	list.Flags().StringVar(&encoding, "encoding", wire.EncodingAuto, "value encoding of -o json: auto, json, text or base64")
	replay := &cobra.Command{
		Use:     "replay GROUP TOPIC",
		Short:   "Publish a group's dead letters back to the topic, once each, for that group only",
		Example: `  pgmsg group dlq replay billing orders`,
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
			n, err := c.ReplayDeadLetters(cmd.Context(), args[1], args[0], &opts)
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"replayed": n, "group": args[0], "topic": args[1]})
			}
			fmt.Fprintf(g.stdout, "replayed %d dead letters of group %q to %q\n", n, args[0], args[1])
			return nil
		},
	}
	for _, c := range []*cobra.Command{list, replay} {
		c.Flags().StringVar(&opts.DeadLetterTopic, "dead-letter-topic", "", "the dead-letter topic (default TOPIC.dlq)")
		c.Flags().IntVar(&opts.Limit, "limit", 1000, "at most this many dead letters")
		cmd.AddCommand(c)
	}
	return cmd
}

// shorten is s on one line, cut to n characters.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (g *globals) listGroups(cmd *cobra.Command, topic string) error {
	js, err := g.jsonOutput()
	if err != nil {
		return err
	}
	c, done, err := g.client(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	if topic != "" {
		if _, err := c.DescribeTopic(cmd.Context(), topic); err != nil {
			return err
		}
	}
	gs, err := c.ListGroups(cmd.Context(), topic, "")
	if err != nil {
		return err
	}
	if js {
		if gs == nil {
			gs = []pgmsg.GroupPartition{}
		}
		return g.printJSON(gs)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tGROUP\tPARTITION\tCURSOR\tEND\tLAG")
	total := map[[2]string]int64{}
	var order [][2]string
	for _, gp := range gs {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\n", gp.Topic, gp.Group, gp.Partition, gp.NextOffset, gp.EndOffset, gp.Lag)
		k := [2]string{gp.Topic, gp.Group}
		if _, ok := total[k]; !ok {
			order = append(order, k)
		}
		total[k] += gp.Lag
	}
	if len(gs) == 0 {
		fmt.Fprintln(w, "(no groups)")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(order) > 1 || (len(order) == 1 && len(gs) > 1) {
		fmt.Fprintln(g.stdout)
		w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TOPIC\tGROUP\tTOTAL LAG")
		for _, k := range order {
			fmt.Fprintf(w, "%s\t%s\t%d\n", k[0], k[1], total[k])
		}
		return w.Flush()
	}
	return nil
}

// listGroupSummaries prints one row per group of every topic.
func (g *globals) listGroupSummaries(cmd *cobra.Command) error {
	js, err := g.jsonOutput()
	if err != nil {
		return err
	}
	c, done, err := g.client(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	gs, err := c.ListGroupSummaries(cmd.Context(), "", "")
	if err != nil {
		return err
	}
	if js {
		if gs == nil {
			gs = []pgmsg.GroupSummary{}
		}
		return g.printJSON(gs)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tGROUP\tPARTITIONS\tLAG\tCLAIMED\tLAST COMMIT")
	for _, s := range gs {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\n", s.Topic, s.Group, s.Partitions, s.Lag, s.Claimed, fmtTime(s.CommittedAt))
	}
	if len(gs) == 0 {
		fmt.Fprintln(w, "(no groups)")
	}
	return w.Flush()
}

func (g *globals) describeGroup(cmd *cobra.Command, topic, group string) error {
	js, err := g.jsonOutput()
	if err != nil {
		return err
	}
	c, done, err := g.client(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	var topics []string
	if topic != "" {
		topics = []string{topic}
	} else {
		gs, err := c.ListGroups(cmd.Context(), "", group)
		if err != nil {
			return err
		}
		for _, gp := range gs {
			if len(topics) == 0 || topics[len(topics)-1] != gp.Topic {
				topics = append(topics, gp.Topic)
			}
		}
		if len(topics) == 0 {
			return fmt.Errorf("unknown group %q: it has not read any topic (see pgmsg group list)", group)
		}
	}
	var descs []*pgmsg.GroupDescription
	for _, t := range topics {
		d, err := c.DescribeGroup(cmd.Context(), t, group)
		if err != nil {
			return err
		}
		descs = append(descs, d)
	}
	if js {
		return g.printJSON(descs)
	}
	for i, d := range descs {
		if i > 0 {
			fmt.Fprintln(g.stdout)
		}
		fmt.Fprintf(g.stdout, "group %s on topic %s: %d members\n", d.Group, d.Topic, len(d.Members))
		w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		if len(d.Members) > 0 {
			fmt.Fprintln(w, "MEMBER\tALIVE\tPARTITIONS\tLAST HEARTBEAT")
			for _, m := range d.Members {
				fmt.Fprintf(w, "%s\t%t\t%v\t%s\n", m.MemberID, m.Alive, m.Partitions, fmtTime(&m.HeartbeatAt))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		}
		fmt.Fprintln(w, "PARTITION\tCURSOR\tEND\tLAG\tOWNER\tCLAIMED BY\tCLAIM EXPIRES\tLAST COMMIT")
		for _, gp := range d.Partitions {
			claimer := gp.ClaimOwner
			if claimer == "" && gp.ClaimExpiresAt != nil {
				claimer = "(anonymous)"
			}
			fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", gp.Partition, gp.NextOffset, gp.EndOffset, gp.Lag,
				dash(gp.Owner), dash(claimer), fmtTime(gp.ClaimExpiresAt), fmtTime(gp.CommittedAt))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}
