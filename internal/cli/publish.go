package cli

import (
	"bufio"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
)

func newPublish(g *globals) *cobra.Command {
	var keySep string
	var partition int32
	var headers []string
	var batch int
	var producerID string
	var sequence int64
	cmd := &cobra.Command{
		Use:   "publish TOPIC",
		Short: "Publish records read from stdin, one per line",
		Long: `publish reads records from stdin, one per line, and appends them to TOPIC.

Each batch of --batch lines is published atomically (all or none). With
--key-separator, each line is KEY<sep>VALUE and the key picks the partition
(as Kafka's partitioner would); lines without the separator have no key.

With --producer-id the publishes are idempotent: line i (from 0) has the
sequence number --sequence + i. When a batch fails (a broken connection may
have stored it or not), the error says from which line and sequence to
resume: fed again from there with the same --batch, the failed batch is
stored once whatever happened to it (counted as already stored if it was),
and the rest is published. pgmsg remembers each producer's last batch per
partition, so resuming earlier than that fails (PM015) and writes nothing.`,
		Example: `  echo '{"order":1}' | pgmsg publish orders
  printf 'alice:hello\nbob:hi\n' | pgmsg publish orders --key-separator :
  seq 1000 | pgmsg publish numbers --partition 0 --header source=seq
  pgmsg publish orders --producer-id import-2026-12-02 < orders.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			if batch < 1 {
				return fmt.Errorf("--batch must be at least 1, got %d", batch)
			}
			if cmd.Flags().Changed("sequence") && producerID == "" {
				return fmt.Errorf("--sequence needs --producer-id")
			}
			hs := map[string][]byte{}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return fmt.Errorf("invalid --header %q: use NAME=VALUE", h)
				}
				hs[k] = []byte(v)
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
			manual := cmd.Flags().Changed("partition")
			perPartition := map[int32]int{}
			total, stored := 0, 0
			var pending []*pgmsg.Record
			flush := func() error {
				if len(pending) == 0 {
					return nil
				}
				opts := &pgmsg.PublishOpts{ManualPartition: manual}
				var err error
				if producerID != "" {
					var dup bool
					dup, err = c.PublishIdempotent(cmd.Context(), producerID, sequence, pending, opts)
					if err != nil && !pgmsg.IsInputError(err) && !errors.Is(err, pgmsg.ErrOutOfOrderSequence) {
						err = fmt.Errorf("%w (to resume, feed the input again from line %d with --producer-id %s --sequence %d --batch %d)",
							err, total+1, producerID, sequence, batch)
					}
					sequence += int64(len(pending))
					if dup {
						stored += len(pending)
					}
				} else {
					err = c.Publish(cmd.Context(), pending, opts)
				}
				if err != nil {
					if total > 0 {
						return fmt.Errorf("after %d records were published: %w", total, err)
					}
					return err
				}
				for _, r := range pending {
					perPartition[r.Partition]++
				}
				total += len(pending)
				pending = pending[:0]
				return nil
			}
			sc := bufio.NewScanner(g.stdin)
			sc.Buffer(make([]byte, 64<<10), 64<<20)
			for sc.Scan() {
				line := sc.Text()
				rec := &pgmsg.Record{Topic: topic, Value: []byte(line), Partition: partition}
				if keySep != "" {
					if k, v, ok := strings.Cut(line, keySep); ok {
						rec.Key, rec.Value = []byte(k), []byte(v)
					}
				}
				if len(hs) > 0 {
					rec.Headers = hs
				}
				pending = append(pending, rec)
				if len(pending) >= batch {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("reading stdin: %w", err)
			}
			if err := flush(); err != nil {
				return err
			}
			parts := make([]int32, 0, len(perPartition))
			for p := range perPartition {
				parts = append(parts, p)
			}
			sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
			if js {
				pp := map[string]int{}
				for _, p := range parts {
					pp[fmt.Sprint(p)] = perPartition[p]
				}
				out := map[string]any{"topic": topic, "published": total, "partitions": pp}
				if producerID != "" {
					out["already_stored"] = stored
				}
				return g.printJSON(out)
			}
			var b strings.Builder
			for i, p := range parts {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "partition %d: %d", p, perPartition[p])
			}
			if total == 0 {
				fmt.Fprintf(g.stdout, "published 0 records to %q (stdin was empty)\n", topic)
				return nil
			}
			already := ""
			if stored > 0 {
				already = fmt.Sprintf("; %d of them were already stored and not written again", stored)
			}
			fmt.Fprintf(g.stdout, "published %s to %q (%s)%s\n", plural(total, "record"), topic, b.String(), already)
			return nil
		},
	}
	cmd.Flags().StringVar(&keySep, "key-separator", "", "split each line into KEY<sep>VALUE at the first separator")
	cmd.Flags().Int32Var(&partition, "partition", 0, "publish every record to this partition (default: by key, else spread)")
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, "header NAME=VALUE added to every record (repeatable)")
	cmd.Flags().IntVar(&batch, "batch", 500, "lines per atomic publish")
	cmd.Flags().StringVar(&producerID, "producer-id", "", "publish idempotently as this producer (1-200 bytes): a re-run stores nothing twice")
	cmd.Flags().Int64Var(&sequence, "sequence", 0, "with --producer-id: the sequence number of the first line")
	return cmd
}
