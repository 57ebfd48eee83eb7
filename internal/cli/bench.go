package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg/internal/bench"
)

// benchFlags are the flags both bench modes take.
type benchFlags struct {
	duration   time.Duration
	warmup     time.Duration
	payload    int
	json       bool
	baseline   []string
	impl       string
	force      bool
	pgSettings []string
	cpuProfile string
	rounds     int
	strict     bool
	holdSnap   bool
}

func (f *benchFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "measured duration of each run")
	fl.DurationVar(&f.warmup, "warmup", time.Second, "load before measuring (not counted)")
	fl.IntVar(&f.payload, "payload", 1024, "payload bytes per record or job (incompressible)")
	fl.BoolVar(&f.json, "json", false, "print a machine-readable JSON summary on stdout")
	fl.StringSliceVar(&f.baseline, "baseline", nil, "also run these baselines with the same settings, side by side: seed (plain SQL for a log and a queue, internal/bench/seed_sql.go), copy (pubsub only: raw COPY into a bare table), floor (pubsub only: a publish, a wake-up after it, and readers that write nothing: the least a log can do per delivery)")
	fl.StringVar(&f.impl, "impl", bench.ImplPgmsg, "what to measure: pgmsg, pgmsg-idempotent (pubsub only: idempotent publishes), seed, packed (pubsub only: the seed SQL with 7 records per row), copy or floor (pubsub only), kafka (pubsub only: through pgmsg's Kafka listener with franz-go producers and consumer groups)")
	fl.BoolVar(&f.force, "force", false, "run even if the schema holds other pgmsg data (only the bench's own topic or queue is created and dropped)")
	fl.IntVar(&f.rounds, "rounds", 1, "run pgmsg and the baselines this many times, alternating, and report each figure's median (the machine's noise hits both sides alike)")
	fl.BoolVar(&f.strict, "strict", false, "exit with an error when a run had errors or measured nothing (for CI smoke runs)")
	fl.BoolVar(&f.holdSnap, "hold-snapshot", false, "keep a REPEATABLE READ transaction open in the database during each run (as a long analytics query or pg_dump would): vacuum cannot remove what the run updates or deletes")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the whole run to this file (go tool pprof)")
	fl.StringArrayVar(&f.pgSettings, "pg-setting", nil, "name=value server setting for the throwaway PostgreSQL started when no database URL is given (repeatable)")
}

func newBench(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure publish, consume and queue throughput and latency",
		Long: `bench loads a database with pgmsg and prints a live progress line (rate,
lag, latency) on stderr and, with --json, a summary on stdout.

--baseline seed runs plain SQL for a log and a queue (no pgmsg code) with
the same settings right after, so that one run shows the difference; the summary then holds the
baseline's figures and the ratios. Each run creates and drops its own topic,
queue or scratch schema, and bench refuses a schema that holds other pgmsg
data unless --force.

Without --database-url or DATABASE_URL it starts a throwaway PostgreSQL from
the machine's binaries (default settings; --pg-setting to change them).`,
	}
	cmd.AddCommand(newBenchPubSub(g), newBenchQueue(g), newBenchScale(g), newBenchFanout(g))
	return cmd
}

func newBenchPubSub(g *globals) *cobra.Command {
	var f benchFlags
	var o bench.PubSubOptions
	cmd := &cobra.Command{
		Use:   "pubsub",
		Short: "Publish and consume a topic: producers, partitions, consumer groups",
		Example: `  pgmsg bench pubsub --producers 64 --batch 1 --baseline seed
  pgmsg bench pubsub --producers 4 --batch 100 --groups 5 --claim-batch 1000 --baseline seed --json
  pgmsg bench pubsub --producers 8 --batch 1000 --baseline copy --duration 15s
  pgmsg bench pubsub --impl kafka --baseline pgmsg --producers 8 --batch 100 --groups 5 --rounds 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Duration, o.Warmup, o.Payload = f.duration, f.warmup, f.payload
			return runBench(cmd.Context(), g, &f, func(ctx context.Context, env *bench.Env, impl string) (any, error) {
				return bench.RunPubSub(ctx, env, impl, o)
			})
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.IntVar(&o.Partitions, "partitions", 4, "partitions of the topic")
	fl.IntVar(&o.Producers, "producers", 8, "concurrent publishers")
	fl.IntVar(&o.Batch, "batch", 100, "records per publish call (1: single-record calls through the batching Producer)")
	fl.IntVar(&o.Groups, "groups", 0, "consumer groups reading concurrently (one consumer per partition each)")
	fl.IntVar(&o.Members, "members", 0, "consumers in each group, sharing the partitions through the group's membership (pgmsg only; 0: one per partition); the summary gives how long their join took to settle")
	fl.IntVar(&o.ClaimBatch, "claim-batch", 1000, "most records per claim")
	fl.Float64Var(&o.Rate, "rate", 0, "cap on writes per second across producers, their calls spread evenly (0: unthrottled)")
	fl.IntVar(&o.Prefill, "prefill", 0, "records published before the run (untimed); with --producers 0 the run measures consumption alone")
	fl.DurationVar(&o.Poll, "poll", 10*time.Millisecond, "wait of an idle consumer of the seed and packed baselines (nothing wakes them) before it polls again")
	fl.DurationVar(&o.PgmsgPoll, "pgmsg-poll", 0, "pgmsg consumers' poll interval when no notification wakes them (0: pgmsg's default, Config.PollInterval)")
	fl.DurationVar(&o.PgmsgClaimCooldown, "pgmsg-claim-cooldown", 0, "least time between a notified pgmsg consumer's claims, so that what is published meanwhile comes in the same claim (ConsumerOpts.ClaimCooldown; 0: pgmsg's default, negative: none)")
	fl.IntVar(&o.PgmsgClaimCooldownMinRate, "pgmsg-claim-cooldown-min-rate", 0, "records per second a pgmsg consumer must be receiving for its claim cooldown to hold (ConsumerOpts.ClaimCooldownMinRate; 0: pgmsg's default, negative: at any rate)")
	fl.DurationVar(&o.PgmsgClaimGatherWait, "pgmsg-claim-gather-wait", 0, "how long a pgmsg consumer's claim of a partition waits for the other groups' claims of it, to go out as one statement (Config.ClaimGatherWait; 0: pgmsg's default, negative: never gathered)")
	fl.Int64Var(&o.PgmsgRecordCacheBytes, "pgmsg-record-cache-bytes", 0, "bytes of records a pgmsg client keeps of partitions that several of its groups read, so that each record is read once for them (Config.RecordCacheBytes; 0: pgmsg's default, negative: none)")
	fl.DurationVar(&o.PgmsgSessionTimeout, "pgmsg-session-timeout", 0, "pgmsg consumers' session timeout (ConsumerOpts.SessionTimeout; 0: pgmsg's default; franz-go's members of --impl kafka default to 45s)")
	fl.StringArrayVar(&o.ReadReplicas, "read-replica-url", nil, "a streaming replica of the database that pgmsg's consumers read claimed records from (repeatable; pgmsg only)")
	fl.StringSliceVar(&o.KafkaBrokers, "kafka-brokers", nil, "--impl kafka: the Kafka listener of another process on the same database and --schema (pgmsg serve --kafka-listen), instead of one in this process")
	fl.IntVar(&o.KafkaServerPID, "kafka-server-pid", 0, "--impl kafka with --kafka-brokers: that process's id; the summary gives its CPU time per record (Linux)")
	fl.DurationVar(&o.KafkaLinger, "kafka-linger", bench.KafkaLingerDefault, "--impl kafka: the franz-go producers' linger")
	fl.BoolVar(&o.KafkaNoIdempotence, "kafka-no-idempotence", false, "--impl kafka: turn the franz-go producers' idempotence (franz-go's default) off")
	o.KafkaListener = benchKafkaListener
	return cmd
}

func newBenchQueue(g *globals) *cobra.Command {
	var f benchFlags
	var o bench.QueueOptions
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Work a prefilled queue with concurrent workers",
		Example: `  pgmsg bench queue --workers 16 --jobs 200000 --baseline seed --json
  pgmsg bench queue --impl pgmsg-seq --baseline pgmsg --sequence-keys 1000 --rounds 3
  pgmsg bench queue --impl pgmsg-keylimit --baseline pgmsg --limit-keys 100 --key-limit 1 --processes 3 --rounds 3
  pgmsg bench queue --impl pgmsg-workflow --jobs 10001 --workflow-levels 10 --workers 16 --warmup 0
  pgmsg bench queue --impl pgmsg-fair --baseline pgmsg --jobs 100000 --rate 100 --tenants 10 --workers 16 --duration 10s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Duration, o.Warmup, o.Payload = f.duration, f.warmup, f.payload
			return runBench(cmd.Context(), g, &f, func(ctx context.Context, env *bench.Env, impl string) (any, error) {
				return bench.RunQueue(ctx, env, impl, o)
			})
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.IntVar(&o.Workers, "workers", 16, "concurrent workers")
	fl.IntVar(&o.Jobs, "jobs", 100000, "jobs enqueued before the run (the run ends early when they are done)")
	fl.Float64Var(&o.Rate, "rate", 0, "jobs per second enqueued during the run (0: none)")
	fl.IntVar(&o.SequenceKeys, "sequence-keys", 1000, "--impl or --baseline pgmsg-seq: the sequence keys its jobs are spread over, round-robin")
	fl.IntVar(&o.LimitKeys, "limit-keys", 100, "--impl or --baseline pgmsg-keylimit: the limit keys its jobs are spread over, round-robin")
	fl.IntVar(&o.CompleteBatch, "complete-batch", 0, "pgmsg queue impls: the workers' completion batch cap (WorkerOpts.CompleteBatch; 0: the default)")
	fl.DurationVar(&o.JobTime, "job-time", 0, "pgmsg queue impls: how long the handler takes per job (a sleep), so that --workers/--job-time paces the queue (0: it returns at once)")
	fl.IntVar(&o.WorkflowLevels, "workflow-levels", 10, "--impl or --baseline pgmsg-workflow: the levels below each workflow's root (each prefill chunk of up to 10,000 jobs is one workflow; checked: the run fails if a job starts before a dependency completed)")
	fl.IntVar(&o.KeyLimit, "key-limit", 1, "--impl or --baseline pgmsg-keylimit: its queue's per-key limit (checked: the run fails if a key's running jobs exceed it)")
	fl.IntVar(&o.Tenants, "tenants", 10, "--impl or --baseline pgmsg-fair: the small tenants the paced jobs (--rate) are spread over, round-robin; the prefilled jobs are one tenant's backlog")
	fl.IntVar(&o.Processes, "processes", 1, "pgmsg queue impls: run the workers as this many clients, each with its own pool, as worker processes would")
	return cmd
}

// runBench runs impl and the baselines one after the other on the same
// database and prints the summary.
func runBench(ctx context.Context, g *globals, f *benchFlags, run bench.RunFunc) error {
	sess := bench.Session{URL: g.resolveURL(), Schema: g.schema, Force: f.force, Progress: g.stderr,
		ProgressTTY: isTerminal(g.stderr), Rounds: f.rounds, CPUProfile: f.cpuProfile, HoldSnapshot: f.holdSnap}
	if len(f.pgSettings) > 0 {
		sess.PGSettings = map[string]string{}
		for _, s := range f.pgSettings {
			k, v, ok := strings.Cut(s, "=")
			if !ok {
				return fmt.Errorf("invalid --pg-setting %q: use name=value", s)
			}
			sess.PGSettings[k] = v
		}
	}
	summary, err := bench.Compare(ctx, sess, append([]string{f.impl}, f.baseline...), run)
	if err != nil {
		return err
	}
	if f.json || g.output == "json" {
		err = g.printJSON(summary)
	} else {
		bench.PrintSummary(g.stdout, summary)
	}
	if err == nil && f.strict {
		err = bench.Check(summary)
	}
	return err
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newBenchScale(g *globals) *cobra.Command {
	var o bench.ScaleOptions
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Build an estate of many topics and time the operations whose cost must stay flat",
		Long: `scale creates --topics topics of --partitions partitions (and --groups
groups on each) in its own schema, then times topic_create at that size,
topic and group listings, the dashboard's overview and a topic page, a
maintenance pass, /metrics (bytes too; with and without per-partition
series) and pg_dump --schema-only; measures the idle CPU of this process
(maintenance loop, a scrape every 15 s) and of PostgreSQL (all its
processes, from /proc: the server must run on this machine), and the CPU
of --members group members heartbeating at the default interval. It
prints one row per operation: median wall time and PostgreSQL CPU time.

It works in schema pgmsg_scale unless --schema is given. A schema it
creates is dropped at the end unless --keep; one that existed is left as it
is and reused (topics already there are not created again).`,
		Example: `  pgmsg bench scale --topics 1000 --partitions 4
  pgmsg bench scale --topics 10000 --partitions 4 --members 1000 --keep`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.URL, o.Progress = g.resolveURL(), g.stderr
			o.Schema = "pgmsg_scale" // not pgmsg's default schema unless asked
			if f := cmd.Flag("schema"); f != nil && f.Changed {
				o.Schema = g.schema
			}
			res, err := bench.RunScale(cmd.Context(), o)
			if err != nil {
				return err
			}
			if jsonOut || g.output == "json" {
				return g.printJSON(res)
			}
			bench.PrintScale(g.stdout, res)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Topics, "topics", 1000, "topics in the estate")
	fl.IntVar(&o.Partitions, "partitions", 4, "partitions of each topic")
	fl.IntVar(&o.Groups, "groups", 1, "consumer groups on each topic")
	fl.IntVar(&o.Members, "members", 1000, "group members heartbeating at the default interval (0: skip)")
	fl.IntVar(&o.MembersPerGroup, "members-per-group", 4, "members of each heartbeating group")
	fl.DurationVar(&o.HeartbeatFor, "heartbeat-for", 20*time.Second, "how long the heartbeats are measured")
	fl.IntVar(&o.MemberProcesses, "member-processes", 0, "then the members as real consumers, idle after joining, spread over this many clients with pools of their own (as worker processes): their memberships' cost")
	fl.BoolVar(&o.MembersFloor, "members-floor", false, "then as many callers of SELECT 1 at the same rate: what the round trips alone cost")
	fl.DurationVar(&o.Idle, "idle", 30*time.Second, "how long the idle CPU is measured (0: skip)")
	fl.IntVar(&o.Repeat, "repeat", 5, "times each operation is timed (the median is printed)")
	fl.BoolVar(&o.CreateOnly, "create-only", false, "time topic_create only (building the estate and at full size), skip the other operations")
	fl.BoolVar(&o.Keep, "keep", false, "keep the estate's schema (and reuse it next time)")
	fl.BoolVar(&jsonOut, "json", false, "print the figures as JSON on stdout")
	return cmd
}

func newBenchFanout(g *globals) *cobra.Command {
	var o bench.FanoutOptions
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "fanout",
		Short: "Many groups reading one topic: whether each keeps up, and the CPU per delivered record",
		Long: `fanout runs, one after the other on one server, a topic of --partitions
partitions published at --rate records a second and read by each count of
--groups groups (one consumer each, pgmsg's defaults, all in this
process). After --warmup it measures for --duration: each group's lag in
records (sampled every second: max and p99 over groups and samples), the
publish-to-handler latency of every record, and the CPU of PostgreSQL (all
its processes, from /proc: the server must run on this machine) and of
this process, as % of a core and per delivered record. It prints one row
per count and the last count's CPU per record relative to the first's.

Without a database URL it starts a throwaway PostgreSQL. It works in
schema pgmsg_fanout unless --schema is given, dropped at the end if it
created it.`,
		Example: `  pgmsg bench fanout --groups 5,1000 --rate 1000`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.URL, o.Progress = g.resolveURL(), g.stderr
			o.Schema = "pgmsg_fanout" // not pgmsg's default schema unless asked
			if f := cmd.Flag("schema"); f != nil && f.Changed {
				o.Schema = g.schema
			}
			res, err := bench.RunFanout(cmd.Context(), o)
			if err != nil {
				return err
			}
			if jsonOut || g.output == "json" {
				return g.printJSON(res)
			}
			bench.PrintFanout(g.stdout, res)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntSliceVar(&o.Groups, "groups", []int{5, 1000}, "the runs' counts of groups, in order")
	fl.IntVar(&o.Partitions, "partitions", 4, "partitions of each run's topic")
	fl.Float64Var(&o.Rate, "rate", 1000, "records published per second")
	fl.IntVar(&o.Batch, "batch", 10, "records per publish call")
	fl.IntVar(&o.Payload, "payload", 100, "bytes per record")
	fl.DurationVar(&o.Warmup, "warmup", 10*time.Second, "load before each measured window")
	fl.DurationVar(&o.Duration, "duration", 30*time.Second, "each measured window")
	fl.IntVar(&o.PoolSize, "pool", 32, "connections of the consumers' pool (the publishers have their own)")
	fl.IntVar(&o.MaxRecords, "max-records", 0, "the consumers' claim cap (ClaimOpts.MaxRecords; 0: pgmsg's default)")
	fl.DurationVar(&o.ClaimCooldown, "claim-cooldown", 0, "the consumers' ConsumerOpts.ClaimCooldown (0: pgmsg's default)")
	fl.IntVar(&o.ClaimCooldownMinRate, "claim-cooldown-min-rate", 0, "the consumers' ConsumerOpts.ClaimCooldownMinRate (0: pgmsg's default; negative: the cooldown holds at any rate)")
	fl.IntVar(&o.ConsumerClaimRate, "consumer-claim-rate", 0, "the consumers' client's Config.ConsumerClaimRate, claims a second (0: pgmsg's default; negative: no budget)")
	fl.BoolVar(&jsonOut, "json", false, "print the figures as JSON on stdout")
	return cmd
}
