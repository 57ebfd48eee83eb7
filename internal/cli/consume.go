package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// consoleRecord is how consume prints a record: one JSON object per line.
type consoleRecord struct {
	Topic         string            `json:"topic"`
	Partition     int32             `json:"partition"`
	Offset        int64             `json:"offset"`
	Key           *string           `json:"key"`
	KeyEncoding   string            `json:"key_encoding,omitempty"`
	Value         json.RawMessage   `json:"value"`
	ValueEncoding string            `json:"value_encoding,omitempty"`
	Headers       map[string]string `json:"headers"`
	Timestamp     string            `json:"timestamp"`
}

func newConsume(g *globals) *cobra.Command {
	var group, from, encoding string
	var max int
	var follow bool
	var partition int32
	cmd := &cobra.Command{
		Use:   "consume TOPIC --group GROUP",
		Short: "Print a consumer group's next records as JSON lines, committing after printing",
		Long: `consume reads TOPIC as consumer group GROUP and prints each record as one JSON
line: {"topic","partition","offset","key","value","headers","timestamp"}.
A batch is committed once it is printed, so the next run continues after it.

--from sets where a NEW group starts (earliest, latest, an offset or an RFC
3339 timestamp); an existing group continues from its cursor (move it with
"pgmsg group reset"). Without --follow, consume stops when the group has
read everything; with it, it waits for new records until Ctrl-C.

Values print as JSON when they are JSON, else as text, else base64 (then
"value_encoding":"base64" says so); --encoding forces one.`,
		Example: `  pgmsg consume orders --group billing
  pgmsg consume orders --group audit --from latest --follow
  pgmsg consume orders --group debug --max 10 | jq .value`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			if group == "" {
				return errors.New("--group is required: the consumer group whose cursor to read and advance")
			}
			if max < 0 {
				return fmt.Errorf("--max must not be negative, got %d", max)
			}
			if err := checkEncoding(encoding); err != nil {
				return err
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
			if cmd.Flags().Changed("from") {
				if gs, err := c.ListGroups(ctx, topic, group); err == nil && len(gs) > 0 {
					fmt.Fprintf(g.stderr, "pgmsg: group %q exists: it continues from its cursor (--from only places new groups; use pgmsg group reset)\n", group)
				}
			}
			// Each batch holds at most MaxAnswerBytesDefault of keys and
			// values (and at least one record), as an HTTP consume would.
			opts := pgmsg.ClaimOpts{Start: from, Member: "pgmsg-cli", MaxBytes: wire.MaxAnswerBytesDefault}
			if cmd.Flags().Changed("partition") {
				opts.Partition = &partition
			}
			enc := json.NewEncoder(g.stdout)
			printed := 0
			// --follow joins the group as a member (partitions are shared
			// with its other members), like a Kafka console consumer;
			// otherwise each batch is a plain claim.
			var cn *pgmsg.Consumer
			if follow {
				copts := &pgmsg.ConsumerOpts{Claim: opts}
				copts.Claim.Partition = nil
				copts.Claim.MaxRecords = pgmsg.ClaimMaxRecordsDefault
				if max > 0 {
					copts.Claim.MaxRecords = min(copts.Claim.MaxRecords, max)
				}
				if opts.Partition != nil {
					copts.Partitions = []int32{*opts.Partition}
				}
				if cn, err = c.NewConsumer(topic, group, copts); err != nil {
					return err
				}
				defer cn.Close()
			}
			for max == 0 || printed < max {
				var cl *pgmsg.Claim
				if follow {
					if cl, err = cn.Poll(ctx); err != nil {
						if ctx.Err() != nil {
							return nil // Ctrl-C
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
				} else {
					opts.MaxRecords = pgmsg.ClaimMaxRecordsDefault
					if max > 0 {
						opts.MaxRecords = min(opts.MaxRecords, max-printed)
					}
					if cl, err = c.Claim(ctx, topic, group, &opts); err != nil {
						return err
					}
					if cl == nil {
						break
					}
				}
				recs := cl.Records
				if max > 0 && len(recs) > max-printed {
					recs = recs[:max-printed]
				}
				for _, r := range recs {
					if err := enc.Encode(toConsole(r, encoding)); err != nil {
						_ = c.Release(context.WithoutCancel(ctx), cl)
						return err
					}
				}
				for {
					if len(recs) < len(cl.Records) {
						err = c.CommitOffset(context.WithoutCancel(ctx), cl, recs[len(recs)-1].Offset+1)
					} else {
						err = c.Commit(context.WithoutCancel(ctx), cl)
					}
					if err == nil || !follow || ride.wait(ctx, err) != nil {
						break
					}
				}
				ride.over()
				if err != nil && follow && (errors.Is(err, pgmsg.ErrClaimExpired) || errors.Is(err, pgmsg.ErrClaimNotHeld)) {
					// The claim ran out during the outage (or its commit went
					// through just before the connection broke).
					fmt.Fprintf(g.stderr, "pgmsg: %d records printed but not committed (%s): they may be delivered again\n", len(recs), oneLine(err))
					err = nil
				}
				if err != nil {
					return fmt.Errorf("records printed but not committed (they will be delivered again): %w", err)
				}
				printed += len(recs)
			}
			if printed == 0 && !follow {
				fmt.Fprintf(g.stderr, "pgmsg: no new records for group %q on %q\n", group, topic)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&group, "group", "g", "", "consumer group (required)")
	cmd.Flags().StringVar(&from, "from", pgmsg.PositionEarliest, "where a new group starts: earliest, latest, OFFSET or TIMESTAMP")
	cmd.Flags().IntVarP(&max, "max", "n", 0, "stop after N records (0: no limit)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep waiting for new records until Ctrl-C")
	cmd.Flags().Int32Var(&partition, "partition", 0, "read only this partition")
	cmd.Flags().StringVar(&encoding, "encoding", wire.EncodingAuto, "value format: auto, json, text or base64")
	g.addReadReplicaFlag(cmd)
	return cmd
}

func toConsole(r *pgmsg.Record, encoding string) consoleRecord {
	j := wire.EncodeRecord(r, encoding)
	out := consoleRecord{Topic: j.Topic, Partition: j.Partition, Offset: j.Offset, Key: j.Key, Value: j.Value,
		Headers: j.Headers, Timestamp: j.Timestamp.UTC().Format("2006-01-02T15:04:05.000000Z07:00")}
	if j.KeyEncoding == wire.EncodingBase64 {
		out.KeyEncoding = j.KeyEncoding
	}
	if j.ValueEncoding == wire.EncodingBase64 && encoding != wire.EncodingBase64 {
		out.ValueEncoding = j.ValueEncoding
	}
	return out
}

// checkEncoding refuses an --encoding the wire package cannot render.
func checkEncoding(encoding string) error {
	switch encoding {
	case wire.EncodingAuto, wire.EncodingJSON, wire.EncodingText, wire.EncodingBase64:
		return nil
	}
	return fmt.Errorf("invalid --encoding %q: use auto, json, text or base64", encoding)
}
