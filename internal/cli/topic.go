package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func newTopic(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, list, describe and delete topics",
		Long: `A topic is a named log split into partitions. Records with the same key go to
the same partition (Kafka's partitioner), and each partition keeps its records
in offset order for every consumer group to read at its own pace.`,
	}
	var cfg pgmsg.TopicConfig
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: `Create a topic with --partitions partitions (1 to 1024; more can be added
later with the SQL function topic_add_partitions, never fewer). Records with the same key go to the
same partition, the one Kafka's default partitioner picks, and are read in
order within it; partitions are what several consumers of one group share.
Names are 1 to 200 of A-Z a-z 0-9 . _ -. Settings such as retention_ms,
cleanup_policy=compact or max_lag_records are set with pgmsg topic config.`,
		Example: `  pgmsg topic create orders --partitions 6
  pgmsg topic create audit --max-record-bytes 65536
  pgmsg topic create events -p 3 && pgmsg topic config events retention_ms=604800000`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			t, err := c.CreateTopic(cmd.Context(), args[0], cfg)
			if err != nil {
				return err
			}
			if js, err := g.jsonOutput(); err != nil || js {
				return g.orJSON(err, t)
			}
			fmt.Fprintf(g.stdout, "created topic %q with %s\n", t.Name, plural(t.Partitions, "partition"))
			return nil
		},
	}
	create.Flags().IntVarP(&cfg.Partitions, "partitions", "p", 1, "number of partitions (1-1024)")
	create.Flags().Int64Var(&cfg.SegmentRecords, "segment-records", 0, "records per segment (default 1048576)")
	create.Flags().IntVar(&cfg.MaxRecordBytes, "max-record-bytes", 0, "largest key+value+headers of a record (default 1 MiB)")
	cmd.AddCommand(create)

	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics",
		Example: "  pgmsg topic list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			ts, err := c.ListTopics(cmd.Context())
			if err != nil {
				return err
			}
			if js, err := g.jsonOutput(); err != nil || js {
				if ts == nil {
					ts = []*pgmsg.Topic{}
				}
				return g.orJSON(err, ts)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TOPIC\tPARTITIONS\tMAX RECORD BYTES\tCREATED")
			for _, t := range ts {
				fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", t.Name, t.Partitions, t.MaxRecordBytes, t.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"))
			}
			return w.Flush()
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use:     "describe NAME",
		Short:   "Show a topic's partitions: offsets, record counts and sizes",
		Example: "  pgmsg topic describe orders",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			d, err := c.DescribeTopic(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if js, err := g.jsonOutput(); err != nil || js {
				return g.orJSON(err, d)
			}
			fmt.Fprintf(g.stdout, "topic %s: %d partitions, max record %d bytes, segment %d records\n",
				d.Name, d.Partitions, d.MaxRecordBytes, d.SegmentRecords)
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PARTITION\tSTART OFFSET\tNEXT OFFSET\tRECORDS\tSEGMENTS")
			for _, p := range d.PartitionInfo {
				fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\n", p.Partition, p.StartOffset, p.NextOffset, p.Records, p.Segments)
			}
			return w.Flush()
		},
	})

	var at string
	offsets := &cobra.Command{
		Use:     "offsets NAME --time TIME",
		Short:   "Show each partition's first offset at or after a time (as Kafka's GetOffsetShell --time)",
		Example: "  pgmsg topic offsets orders --time 2026-11-30T10:00:00Z\n  pgmsg topic offsets orders --time 1h",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := wire.ParseTime("--time", at)
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			out, err := c.OffsetsForTime(cmd.Context(), args[0], t)
			if err != nil {
				return err
			}
			if js, err := g.jsonOutput(); err != nil || js {
				return g.orJSON(err, out)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PARTITION\tOFFSET")
			for _, p := range out {
				fmt.Fprintf(w, "%d\t%d\n", p.Partition, p.Offset)
			}
			return w.Flush()
		},
	}
	offsets.Flags().StringVar(&at, "time", "", "RFC 3339 time, or a duration ago (1h30m): the first record at or after it (the end offset when none is)")
	_ = offsets.MarkFlagRequired("time")
	cmd.AddCommand(offsets)

	cmd.AddCommand(&cobra.Command{
		Use:   "config NAME [KEY=VALUE ...]",
		Short: "Show or change a topic's settings (retention, compaction, backpressure)",
		Long: `Without KEY=VALUE arguments, prints the topic's settings. Each KEY=VALUE sets
a setting: VALUE is read as JSON when it parses (numbers, true/false, null),
else as a string; KEY= (empty) or KEY=null removes the setting. Settings read
by pgmsg: retention_ms, retention_bytes, retention_records, hard_limit_ms,
hard_limit_bytes, hard_limit_records, group_ttl_ms, cleanup_policy,
delete_retention_ms, max_lag_records, max_lag_bytes, backpressure_timeout_ms
(docs/operations.md).`,
		Example: `  pgmsg topic config orders
  pgmsg topic config orders max_lag_bytes=1073741824 backpressure_timeout_ms=2000
  pgmsg topic config orders retention_ms=604800000 max_lag_records=`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			settings, err := parseSettings(args[1:])
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var t *pgmsg.Topic
			if len(settings) == 0 {
				d, err := c.DescribeTopic(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				t = &d.Topic
			} else if t, err = c.SetTopicSettings(cmd.Context(), args[0], settings); err != nil {
				return err
			}
			if js, err := g.jsonOutput(); err != nil || js {
				if t.Settings == nil {
					t.Settings = map[string]any{}
				}
				return g.orJSON(err, map[string]any{"topic": t.Name, "settings": t.Settings})
			}
			keys := make([]string, 0, len(t.Settings))
			for k := range t.Settings {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(keys) == 0 {
				fmt.Fprintf(g.stdout, "topic %s has no settings\n", t.Name)
				return nil
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SETTING\tVALUE")
			for _, k := range keys {
				v, _ := json.Marshal(t.Settings[k])
				fmt.Fprintf(w, "%s\t%s\n", k, v)
			}
			return w.Flush()
		},
	})

	var force bool
	del := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a topic (--force: with its records and consumer groups)",
		Long: `Delete a topic. A topic that still stores records or has consumer groups
is refused (PM017 topic_not_empty) unless --force, which drops its records
and groups with it; nothing can bring them back.`,
		Example: "  pgmsg topic delete scratch\n  pgmsg topic delete orders --force",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			del := c.DeleteEmptyTopic
			if force {
				del = c.DeleteTopic
			}
			if err := del(cmd.Context(), args[0]); err != nil {
				return err
			}
			if js, err := g.jsonOutput(); err != nil || js {
				return g.orJSON(err, map[string]any{"deleted": args[0]})
			}
			fmt.Fprintf(g.stdout, "deleted topic %q\n", args[0])
			return nil
		},
	}
	del.Flags().BoolVar(&force, "force", false, "also delete the topic's records and consumer groups")
	cmd.AddCommand(del)
	return cmd
}

// orJSON returns err if set, else prints v as JSON.
func (g *globals) orJSON(err error, v any) error {
	if err != nil {
		return err
	}
	return g.printJSON(v)
}

// plural formats n things: "1 partition", "3 partitions".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// parseSettings reads KEY=VALUE arguments: VALUE as JSON when it parses,
// else as a string; an empty VALUE removes the key (nil).
func parseSettings(args []string) (map[string]any, error) {
	out := map[string]any{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: setting %q: use KEY=VALUE (KEY= removes it)", pgmsg.ErrInvalidArgument, a)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%w: setting %q given twice", pgmsg.ErrInvalidArgument, k)
		}
		var val any
		if v != "" {
			if err := json.Unmarshal([]byte(v), &val); err != nil {
				val = v
			}
		}
		out[k] = val
	}
	return out, nil
}
