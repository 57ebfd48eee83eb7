package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
)

// newQueueBatch is "queue batch": enqueue a batch with callbacks, show one.
func newQueueBatch(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Enqueue jobs as a batch with callbacks, and show a batch's progress",
		Long: `A batch's callbacks are jobs enqueued once, when every job of the batch is
final: on_complete if all completed, else on_discard (one went dead, or was
cancelled or deleted), then on_finished in either case. A callback job's
metadata has "batch": {id, callback, total, completed, cancelled, dead}.`,
	}
	cmd.AddCommand(newQueueBatchEnqueue(g), newQueueBatchShow(g))
	return cmd
}

// batchFile is the JSON "queue batch enqueue" reads.
type batchFile struct {
	Jobs []struct {
		// Payload is any JSON value, stored as its JSON text.
		Payload     json.RawMessage `json:"payload"`
		Kind        string          `json:"kind"`
		Priority    int             `json:"priority"`
		MaxAttempts int             `json:"max_attempts"`
		UniqueKey   string          `json:"unique_key"`
		Tags        []string        `json:"tags"`
		Metadata    json.RawMessage `json:"metadata"`
	} `json:"jobs"`
	OnComplete *batchFileCallback `json:"on_complete"`
	OnDiscard  *batchFileCallback `json:"on_discard"`
	OnFinished *batchFileCallback `json:"on_finished"`
}

type batchFileCallback struct {
	Kind     string          `json:"kind"`
	Args     json.RawMessage `json:"args"`
	Queue    string          `json:"queue"`
	Priority int             `json:"priority"`
	Metadata json.RawMessage `json:"metadata"`
}

func (c *batchFileCallback) lib() *pgmsg.BatchCallback {
	if c == nil {
		return nil
	}
	cb := &pgmsg.BatchCallback{Kind: c.Kind, Queue: c.Queue, Priority: c.Priority}
	if c.Args != nil {
		cb.Args = c.Args
	}
	if c.Metadata != nil {
		cb.Metadata = c.Metadata
	}
	return cb
}

// newQueueBatchEnqueue is "queue batch enqueue QUEUE": a batch from JSON
// on stdin.
func newQueueBatchEnqueue(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "enqueue QUEUE",
		Short: "Enqueue a batch read as JSON from stdin: its jobs and callbacks",
		Long: `enqueue reads one JSON object from stdin: {"jobs": [{"payload": <JSON>,
"kind", "priority", "max_attempts", "unique_key", "tags", "metadata"}, ...],
"on_complete": {"kind", "args", "queue", "priority", "metadata"},
"on_discard": {...}, "on_finished": {...}} (each callback optional), and
enqueues the jobs into QUEUE as one batch, all or nothing. It prints the
batch's id and its jobs.`,
		Example: `  echo '{"jobs": [{"payload": {"n": 1}}, {"payload": {"n": 2}}],
        "on_complete": {"kind": "report", "args": {"album": 7}}}' | pgmsg queue batch enqueue images`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			raw, err := io.ReadAll(g.stdin)
			if err != nil {
				return fmt.Errorf("reading stdin: %w", err)
			}
			var f batchFile
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				return fmt.Errorf("%w: stdin is not a batch's JSON: %v", pgmsg.ErrInvalidArgument, err)
			}
			params := make([]pgmsg.EnqueueParams, len(f.Jobs))
			for i, j := range f.Jobs {
				params[i] = pgmsg.EnqueueParams{Kind: j.Kind, Priority: j.Priority, MaxAttempts: j.MaxAttempts,
					UniqueKey: j.UniqueKey, Tags: j.Tags, Metadata: j.Metadata}
				if j.Payload != nil {
					params[i].Payload = j.Payload
				}
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := c.EnqueueBatch(cmd.Context(), args[0], params, &pgmsg.BatchOpts{
				OnComplete: f.OnComplete.lib(), OnDiscard: f.OnDiscard.lib(), OnFinished: f.OnFinished.lib()})
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(res)
			}
			fmt.Fprintf(g.stdout, "batch %d: enqueued %d jobs to %q\n", res.ID, len(res.Jobs), args[0])
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATE\tDUPLICATE")
			for _, j := range res.Jobs {
				fmt.Fprintf(w, "%d\t%s\t%t\n", j.ID, j.State, j.Duplicate)
			}
			return w.Flush()
		},
	}
}

// newQueueBatchShow is "queue batch show BATCH-ID".
func newQueueBatchShow(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show BATCH-ID",
		Short: "Show a batch: its jobs by state and its callbacks",
		Example: `  pgmsg queue batch show 42
  pgmsg queue batch show 42 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return fmt.Errorf("%w: batch id %q is not a positive integer", pgmsg.ErrInvalidArgument, args[0])
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			b, err := c.GetBatch(cmd.Context(), id)
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(b)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "batch\t%d\nqueue\t%s\ntotal\t%d\n", b.ID, b.Queue, b.Total)
			fmt.Fprintf(w, "live\tpending %d, available %d, scheduled %d, retrying %d, running %d\n",
				b.Pending, b.Available, b.Scheduled, b.Retrying, b.Running)
			fmt.Fprintf(w, "final\tcompleted %d, cancelled %d, dead %d\n", b.Completed, b.Cancelled, b.Dead)
			finished := "-"
			if b.FinishedAt != nil {
				finished = b.FinishedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "finished\t%s\n", finished)
			for _, cb := range []struct {
				name string
				spec json.RawMessage
				id   int64
			}{{"on_complete", b.OnComplete, b.CompleteJobID}, {"on_discard", b.OnDiscard, b.DiscardJobID},
				{"on_finished", b.OnFinished, b.FinishedJobID}} {
				if cb.spec == nil {
					continue
				}
				job := "not enqueued"
				if cb.id != 0 {
					job = "job " + strconv.FormatInt(cb.id, 10)
				}
				fmt.Fprintf(w, "%s\t%s (%s)\n", cb.name, cb.spec, job)
			}
			return w.Flush()
		},
	}
}
