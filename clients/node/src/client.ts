// Pgmsg makes single calls of the SQL API (docs/sql-api.md) on anything
// that has pg's query(): a Pool (each call its own transaction) or a
// client inside the caller's transaction (publish and enqueue then commit
// with the caller's writes: an outbox).

import { PgmsgError, translate } from "./errors";

/** What Pgmsg needs of node-postgres: a Pool, a Client or a PoolClient. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

export interface PgmsgOptions {
  /** Schema pgmsg was migrated into. Default "pgmsg". */
  schema?: string;
}

/** A record of a topic. value null is a tombstone. */
export interface Record {
  value: Buffer | string | null;
  key?: Buffer | string | null;
  /** Name -> bytes, stored as a JSON object of base64 values. */
  headers?: { [name: string]: Buffer } | null;
  timestamp?: Date | null;
}

/** A record as a claim returns it. */
export interface ClaimedRecord {
  partition: number;
  offset: number;
  timestamp: Date;
  key: Buffer | null;
  value: Buffer | null;
  headers: { [name: string]: Buffer } | null;
}

/** One partition written by publish: record i of its share has offset baseOffset + i. */
export interface PublishResult {
  partition: number;
  baseOffset: number;
  recordCount: number;
  timestamp: Date;
}

/** Records of one partition leased to the caller until expiresAt; epoch
 * identifies the lease for commit, release and extend. */
export interface Claim {
  topic: string;
  group: string;
  partition: number;
  epoch: number;
  expiresAt: Date;
  records: ClaimedRecord[];
}

export interface ClaimOptions {
  maxRecords?: number;
  /** Lease in milliseconds. Default 30000. */
  leaseMs?: number;
  partition?: number;
  /** Where a new group starts: "earliest" (default), "latest", an offset or a time. */
  start?: string;
}

/** A job for enqueueMany: enqueue()'s arguments for one job. */
export interface JobSpec {
  payload: Buffer | string;
  kind?: string;
  priority?: number;
  runAt?: Date;
  delayMs?: number;
  maxAttempts?: number;
  uniqueKey?: string;
  timeoutMs?: number;
  tags?: string[];
  metadata?: { [k: string]: unknown };
  /**
   * The queue's jobs with the same sequenceKey run one at a time, in enqueue
   * order; a job that goes dead or is cancelled holds its sequence
   * (sequence_resume() in SQL) unless sequenceContinue.
   */
  sequenceKey?: string;
  sequenceContinue?: boolean;
  /**
   * The job's key for its queue's key_limit (at most key_limit jobs of a key
   * waiting to run or running at once; the others are pending), instead of
   * the queue's key_field of the payload.
   */
  limitKey?: string;
  /**
   * Workflows: the job waits (pending) until every dependency completed: ids
   * of jobs of the queue (numbers) and names (strings) of jobs of the same
   * enqueueMany batch; a cancelled or dead dependency cancels it unless
   * ignoreCancelledDeps / ignoreDeadDeps.
   */
  name?: string;
  dependsOn?: Array<number | string>;
  ignoreCancelledDeps?: boolean;
  ignoreDeadDeps?: boolean;
  /**
   * Fair share: the job's tenant (1 to 200 of A-Z a-z 0-9 . _ : / = @ + -).
   * A queue whose jobs name tenants serves them by weight, so one tenant's
   * backlog does not starve another's jobs (tenant_weight_set() in SQL).
   */
  tenant?: string;
}

export interface EnqueueResult {
  id: number;
  duplicate: boolean;
  state: string;
  runAt: Date | null;
}

/** enqueue_many()'s arguments, $1 to $18, as enqueueArgs() gives them. */
const ENQUEUE_ARGS = `$1, $2::bytea[],
         p_kinds => $3::text[], p_priorities => $4::int[], p_run_ats => $5::timestamptz[],
         p_delays => $6::interval[], p_max_attempts => $7::int[], p_unique_keys => $8::text[],
         p_timeouts => $9::interval[], p_tags => $10::text[]::jsonb[], p_metadata => $11::text[]::jsonb[],
         p_sequence_keys => $12::text[], p_sequence_continues => $13::boolean[], p_limit_keys => $14::text[],
         p_names => $15::text[], p_depends_on => $16::text[]::jsonb[], p_deps_ignore_cancelled => $17::boolean[],
         p_deps_ignore_dead => $18::boolean[], p_tenants => $19::text[]`;

function enqueueArgs(queue: string, jobs: JobSpec[]): unknown[] {
  const col = <T>(f: (j: JobSpec) => T | undefined) => parallel(jobs.map((j) => f(j) ?? null));
  return [
    queue,
    jobs.map((j) => bytes(j.payload)),
    col((j) => j.kind),
    col((j) => j.priority),
    col((j) => j.runAt),
    col((j) => interval(j.delayMs)),
    col((j) => j.maxAttempts),
    col((j) => j.uniqueKey),
    col((j) => interval(j.timeoutMs)),
    col((j) => (j.tags ? JSON.stringify(j.tags) : null)),
    col((j) => (j.metadata ? JSON.stringify(j.metadata) : null)),
    col((j) => j.sequenceKey),
    col((j) => j.sequenceContinue),
    col((j) => j.limitKey),
    col((j) => j.name),
    col((j) => (j.dependsOn ? JSON.stringify(j.dependsOn) : null)),
    col((j) => j.ignoreCancelledDeps),
    col((j) => j.ignoreDeadDeps),
    col((j) => j.tenant),
  ];
}

/** A batch's callback: a job enqueued once every job of the batch is final. */
export interface BatchCallback {
  kind: string;
  /** Any JSON value: the job's payload, as its JSON text (none: empty). */
  args?: unknown;
  /** The job's queue (created if need be); default the batch's. */
  queue?: string;
  priority?: number;
  metadata?: { [k: string]: unknown };
}

export interface BatchOptions {
  onComplete?: BatchCallback;
  onDiscard?: BatchCallback;
  onFinished?: BatchCallback;
}

export interface BatchResult {
  id: number;
  jobs: EnqueueResult[];
}

/** batch_get(): live jobs by state, final ones by how they ended, callbacks. */
export interface Batch {
  id: number;
  queue: string;
  total: number;
  createdAt: Date;
  pending: number;
  available: number;
  scheduled: number;
  retrying: number;
  running: number;
  completed: number;
  cancelled: number;
  dead: number;
  finishedAt: Date | null;
  onComplete: BatchCallback | null;
  onDiscard: BatchCallback | null;
  onFinished: BatchCallback | null;
  completeJobId: number | null;
  discardJobId: number | null;
  finishedJobId: number | null;
}

/** A job held by the caller: finish it with (id, leaseToken). */
export interface Job {
  id: number;
  queue: string;
  kind: string | null;
  payload: Buffer;
  priority: number;
  attempt: number;
  maxAttempts: number;
  leaseToken: number;
  leaseExpiresAt: Date;
  runAt: Date;
  enqueuedAt: Date;
  attemptedAt: Date;
  uniqueKey: string | null;
  errors: unknown;
  /** The job's run-time limit in milliseconds, or null. */
  timeoutMs: number | null;
  /** The lease the claim gave, in milliseconds (database clock). */
  leaseMs: number;
  /** Lines the handler logs for this attempt (job.log.push(line)): a
   * Worker keeps them with the attempt's outcome (jobLogs). */
  log: string[];
  /** The outputs of the steps the job completed, by name: read once per
   * attempt by the first step() call, then kept up to date by it. */
  stepsDone?: Map<string, unknown>;
}

/** The longest step name, in bytes: 1 to STEP_NAME_MAX_BYTES of A-Z a-z
 * 0-9 . _ - : / (job_step_save's check, PM122). */
export const STEP_NAME_MAX_BYTES = 200;
const STEP_NAME = new RegExp(`^[A-Za-z0-9._:/-]{1,${STEP_NAME_MAX_BYTES}}$`);

/** What one attempt's log keeps by default, in bytes, as the Go worker's
 * (the SQL API cuts any log at 1 MiB). */
export const LOG_MAX_BYTES = 64 << 10;

/** The attempt's log as stored: job.log's lines, cut at maxBytes with a
 * last line that says so; null when nothing was logged. */
export function jobLogText(job: Job, maxBytes = LOG_MAX_BYTES): string | null {
  if (!job.log || job.log.length === 0) return null;
  const text = Buffer.from(job.log.map((l) => l + "\n").join(""));
  if (text.length <= maxBytes) return text.toString();
  const marker = `[pgmsg: log truncated at ${maxBytes} bytes]\n`;
  let cut = Math.max(maxBytes - Buffer.byteLength(marker), 0);
  // Back to a character boundary: never a UTF-8 continuation byte first.
  while (cut > 0 && (text[cut] & 0xc0) === 0x80) cut--;
  return text.subarray(0, cut).toString() + marker;
}

/** What a job's handler logged during one attempt (jobLogs). */
export interface JobLog {
  attempt: number;
  at: Date;
  /** completed, retrying, dead or snoozed */
  outcome: string;
  log: string;
}

/** A step checkpoint a job recorded (jobSteps, saveStep). */
export interface JobStep {
  name: string;
  attempt: number;
  at: Date;
  output: unknown;
}

export interface ClaimJobsOptions {
  limit?: number;
  /** Lease in milliseconds; default the queue's. */
  leaseMs?: number;
  worker?: string;
}

/** A topic as topicCreate() and topicList() return it. */
export interface Topic {
  name: string;
  partitions: number;
  segmentRecords: number;
  maxRecordBytes: number;
  /** Settings (retention_ms, cleanup_policy, ...) as the SQL API stores them. */
  config: { [k: string]: unknown };
  createdAt: Date;
}

/** One partition of describeTopic(). */
export interface TopicPartition {
  partition: number;
  startOffset: number;
  nextOffset: number;
  records: number;
  segments: number;
  approxBytes: number;
}

/** A group's cursor on one partition (listGroups, resetGroup); endOffset,
 * lag and committedAt come from listGroups only. */
export interface GroupPartition {
  topic: string;
  group: string;
  partition: number;
  nextOffset: number;
  endOffset?: number;
  lag?: number;
  committedAt?: Date | null;
}

/** A queue's settings; durations in milliseconds, null where no limit is set. */
export interface QueueSettings {
  maxAttempts?: number;
  leaseMs?: number;
  retryBackoffMs?: number;
  retryBackoffMaxMs?: number;
  archiveRetentionMs?: number;
  maxPayloadBytes?: number;
  maxDepth?: number | null;
  backpressureTimeoutMs?: number;
  jobTimeoutMs?: number | null;
  deadRetentionMs?: number | null;
  rateLimit?: number | null;
  maxRunning?: number | null;
}

export interface Queue extends Required<QueueSettings> {
  name: string;
  paused: boolean;
  createdAt: Date;
}

/** queue_stats(): live jobs by state, the archive's size, the age of the
 * oldest available job (null: none waiting), jobs archived in the last minute. */
export interface QueueStats {
  queue: string;
  available: number;
  scheduled: number;
  running: number;
  retrying: number;
  dead: number;
  archived: number;
  oldestAvailableSeconds: number | null;
  archivedLastMinute: number;
}

// queue_create's settings: [option, SQL argument, cast], in Queue's order.
const queueSettings: [keyof QueueSettings, string, string][] = [
  ["maxAttempts", "max_attempts", "int"],
  ["leaseMs", "lease", "interval"],
  ["retryBackoffMs", "retry_backoff", "interval"],
  ["retryBackoffMaxMs", "retry_backoff_max", "interval"],
  ["archiveRetentionMs", "archive_retention", "interval"],
  ["maxPayloadBytes", "max_payload_bytes", "int"],
  ["maxDepth", "max_depth", "bigint"],
  ["backpressureTimeoutMs", "backpressure_timeout", "interval"],
  ["jobTimeoutMs", "job_timeout", "interval"],
  ["deadRetentionMs", "dead_retention", "interval"],
  ["rateLimit", "rate_limit", "float8"],
  ["maxRunning", "max_running", "int"],
];

const topicColumns = "name, partitions, segment_records, max_record_bytes, config, created_at";
const queueColumns =
  "name, " +
  queueSettings.map(([, arg, cast]) => (cast === "interval" ? `extract(epoch FROM ${arg}) * 1000 AS ${arg}` : arg)).join(", ") +
  ", paused, created_at";

function toTopic(r: any): Topic {
  return {
    name: r.name,
    partitions: r.partitions,
    segmentRecords: num(r.segment_records),
    maxRecordBytes: r.max_record_bytes,
    config: r.config,
    createdAt: r.created_at,
  };
}

function toQueue(r: any): Queue {
  const q: any = { name: r.name, paused: r.paused, createdAt: r.created_at };
  for (const [opt, arg] of queueSettings) q[opt] = r[arg] === null ? null : Number(r[arg]);
  return q as Queue;
}

/** bigint columns come as strings from pg: exact as numbers up to 2^53 - 1
 * (claim epochs and lease tokens are below it by design). */
function num(v: string | number): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n)) {
    throw new RangeError(`pgmsg: ${v} is not exact as a JavaScript number`);
  }
  return n;
}

function bytes(v: Buffer | string | null | undefined): Buffer | null {
  if (v === null || v === undefined) return null;
  return typeof v === "string" ? Buffer.from(v) : v;
}

function interval(ms: number | null | undefined): string | null {
  return ms === null || ms === undefined ? null : `${ms} milliseconds`;
}

/** A parallel array argument, or NULL when every entry is NULL (the
 * functions read a NULL array as all defaults). */
function parallel<T>(values: (T | null)[]): (T | null)[] | null {
  return values.every((v) => v === null) ? null : values;
}

export function encodeHeaders(h: Record["headers"]): string | null {
  if (!h || Object.keys(h).length === 0) return null;
  const out: { [k: string]: string } = {};
  for (const [k, v] of Object.entries(h)) out[k] = Buffer.from(v).toString("base64");
  return JSON.stringify(out);
}

export function decodeHeaders(h: { [k: string]: string } | null): { [k: string]: Buffer } | null {
  if (!h) return null;
  const out: { [k: string]: Buffer } = {};
  for (const [k, v] of Object.entries(h)) out[k] = Buffer.from(v, "base64");
  return out;
}

function quoteIdent(s: string): string {
  return '"' + s.replace(/"/g, '""') + '"';
}

export class Pgmsg {
  readonly schema: string;
  /** The channel publish and enqueue notify (pg_notify) on. */
  readonly channel: string;
  private readonly s: string;

  constructor(
    readonly db: Queryable,
    opts: PgmsgOptions = {},
  ) {
    this.schema = opts.schema ?? "pgmsg";
    this.channel = this.schema + "_log";
    this.s = quoteIdent(this.schema);
  }

  /** A Pgmsg for the same schema on another connection (a transaction's client). */
  with(db: Queryable): Pgmsg {
    return new Pgmsg(db, { schema: this.schema });
  }

  /** LISTEN statement for the schema's channel. */
  listenSQL(): string {
    return "LISTEN " + quoteIdent(this.channel);
  }

  private async rows(sql: string, args: unknown[]): Promise<any[]> {
    try {
      return (await this.db.query(sql.replace(/\{s\}/g, this.s), args)).rows;
    } catch (e) {
      throw translate(e);
    }
  }

  // The log ------------------------------------------------------------------

  /** Appends records in one call of publish(); one result per partition written. */
  async publish(topic: string, records: Record[], opts: { partition?: number } = {}): Promise<PublishResult[]> {
    const rows = await this.rows(
      `SELECT partition, base_offset, record_count, timestamp FROM {s}.publish($1, $2::bytea[], $3::bytea[],
         $4::text[]::jsonb[], $5::timestamptz[], $6::int)`,
      [
        topic,
        records.map((r) => bytes(r.value)),
        parallel(records.map((r) => bytes(r.key))),
        parallel(records.map((r) => encodeHeaders(r.headers))),
        parallel(records.map((r) => r.timestamp ?? null)),
        opts.partition ?? null,
      ],
    );
    return rows.map((r) => ({
      partition: r.partition,
      baseOffset: num(r.base_offset),
      recordCount: r.record_count,
      timestamp: r.timestamp,
    }));
  }

  /** Leases the next records of one partition (null: nothing to read). */
  async claim(topic: string, group: string, opts: ClaimOptions = {}): Promise<Claim | null> {
    const rows = await this.rows(
      `SELECT partition, claim_epoch, claim_expires_at, "offset", "timestamp", key, value, headers
         FROM {s}.claim($1, $2, $3, $4::interval, p_partition => $5::int, p_start => $6)`,
      [topic, group, opts.maxRecords ?? 100, interval(opts.leaseMs ?? 30000), opts.partition ?? null, opts.start ?? "earliest"],
    );
    if (rows.length === 0) return null;
    return {
      topic,
      group,
      partition: rows[0].partition,
      epoch: num(rows[0].claim_epoch),
      expiresAt: rows[0].claim_expires_at,
      records: rows.map((r) => ({
        partition: r.partition,
        offset: num(r.offset),
        timestamp: r.timestamp,
        key: r.key,
        value: r.value,
        headers: decodeHeaders(r.headers),
      })),
    };
  }

  /** Moves the group's cursor past the claim; returns the new cursor. */
  async commit(claim: Claim): Promise<number> {
    const rows = await this.rows(`SELECT {s}.commit($1, $2, $3, $4) AS next`, [claim.topic, claim.group, claim.partition, claim.epoch]);
    return num(rows[0].next);
  }

  /** Ends the claim without moving the cursor: its records come again at once. */
  async release(claim: Claim): Promise<void> {
    await this.rows(`SELECT {s}.release($1, $2, $3, $4)`, [claim.topic, claim.group, claim.partition, claim.epoch]);
  }

  /** Keeps the claim until now + leaseMs (a heartbeat). */
  async extend(claim: Claim, leaseMs = 30000): Promise<void> {
    const rows = await this.rows(`SELECT {s}.extend($1, $2, $3, $4, $5::interval) AS expires`, [
      claim.topic,
      claim.group,
      claim.partition,
      claim.epoch,
      interval(leaseMs),
    ]);
    claim.expiresAt = rows[0].expires;
  }

  // The queue ------------------------------------------------------------------

  async enqueue(queue: string, payload: Buffer | string, opts: Omit<JobSpec, "payload"> = {}): Promise<EnqueueResult> {
    return (await this.enqueueMany(queue, [{ ...opts, payload }]))[0];
  }

  /** A batch in one call of enqueue_many(); one result per job, in order. */
  async enqueueMany(queue: string, jobs: JobSpec[]): Promise<EnqueueResult[]> {
    const rows = await this.rows(`SELECT id, duplicate, state, run_at FROM {s}.enqueue_many(${ENQUEUE_ARGS})`, enqueueArgs(queue, jobs));
    return rows.map((r) => ({ id: num(r.id), duplicate: r.duplicate, state: r.state, runAt: r.run_at }));
  }

  /**
   * The jobs as one batch, all or nothing (job_enqueue_batch()): once every
   * job is final, onComplete (all completed) or onDiscard (one dead,
   * cancelled or deleted), then onFinished, are enqueued exactly once. The
   * callback job's metadata gets "batch": {id, callback, total, completed,
   * cancelled, dead}. PM010 empty, PM120 a bad callback.
   */
  async enqueueBatch(queue: string, jobs: JobSpec[], opts: BatchOptions = {}): Promise<BatchResult> {
    const cb = (c?: BatchCallback) => (c ? JSON.stringify(c) : null);
    const rows = await this.rows(
      `SELECT batch_id, id, duplicate, state, run_at FROM {s}.job_enqueue_batch(${ENQUEUE_ARGS},
         p_on_complete => $20::jsonb, p_on_discard => $21::jsonb, p_on_finished => $22::jsonb)`,
      [...enqueueArgs(queue, jobs), cb(opts.onComplete), cb(opts.onDiscard), cb(opts.onFinished)],
    );
    return {
      id: num(rows[0].batch_id),
      jobs: rows.map((r) => ({ id: num(r.id), duplicate: r.duplicate, state: r.state, runAt: r.run_at })),
    };
  }

  /** The batch's counts by state and callbacks (batch_get()); PM121 unknown. */
  async getBatch(id: number): Promise<Batch> {
    const r = (
      await this.rows(
        `SELECT batch_id, queue, total, created_at, pending, available, scheduled, retrying, running, completed,
                cancelled, dead, finished_at, on_complete, on_discard, on_finished, complete_job_id, discard_job_id,
                finished_job_id FROM {s}.batch_get($1)`,
        [id],
      )
    )[0];
    const opt = (v: unknown) => (v === null ? null : num(v as string));
    return {
      id: num(r.batch_id), queue: r.queue, total: r.total, createdAt: r.created_at, pending: num(r.pending),
      available: num(r.available), scheduled: num(r.scheduled), retrying: num(r.retrying), running: num(r.running),
      completed: num(r.completed), cancelled: num(r.cancelled), dead: num(r.dead), finishedAt: r.finished_at,
      onComplete: r.on_complete, onDiscard: r.on_discard, onFinished: r.on_finished,
      completeJobId: opt(r.complete_job_id), discardJobId: opt(r.discard_job_id), finishedJobId: opt(r.finished_job_id),
    };
  }

  /** Creates the queue with default settings unless it exists. */
  async ensureQueue(queue: string): Promise<void> {
    await this.rows(`SELECT name FROM {s}.queue_create($1, p_if_not_exists => true)`, [queue]);
  }


  /** Leases up to limit claimable jobs. */
  async claimJobs(queue: string, opts: ClaimJobsOptions = {}): Promise<Job[]> {
    const rows = await this.rows(
      `SELECT id, queue, kind, payload, priority, attempt, max_attempts, lease_token, lease_expires_at, run_at,
              enqueued_at, attempted_at, unique_key, errors,
              extract(epoch FROM timeout) * 1000 AS timeout_ms,
              extract(epoch FROM lease_expires_at - attempted_at) * 1000 AS lease_ms
         FROM {s}.job_claim($1, $2, $3::interval, $4)`,
      [queue, opts.limit ?? 1, interval(opts.leaseMs), opts.worker ?? null],
    );
    return rows.map((r) => ({
      id: num(r.id),
      queue: r.queue,
      kind: r.kind,
      payload: r.payload,
      priority: r.priority,
      attempt: r.attempt,
      maxAttempts: r.max_attempts,
      leaseToken: num(r.lease_token),
      leaseExpiresAt: r.lease_expires_at,
      runAt: r.run_at,
      enqueuedAt: r.enqueued_at,
      attemptedAt: r.attempted_at,
      uniqueKey: r.unique_key,
      errors: r.errors,
      timeoutMs: r.timeout_ms === null ? null : Number(r.timeout_ms),
      leaseMs: Number(r.lease_ms),
      log: [],
    }));
  }

  /** Archives the job with an optional JSON result and what the attempt
   * logged (opts.log, e.g. jobLogText(job)). PM106 if its lease was lost. */
  async complete(job: Job, result?: unknown, opts: { log?: string | null } = {}): Promise<void> {
    await this.rows(`SELECT {s}.job_complete($1, $2, $3::jsonb, $4::text)`, [
      job.id,
      job.leaseToken,
      result === undefined || result === null ? null : JSON.stringify(result),
      opts.log ?? null,
    ]);
  }

  /** Records the error (and the attempt's log) and schedules a retry (or
   * dead); returns the new state. */
  async fail(job: Job, error: string, opts: { retryInMs?: number; dead?: boolean; log?: string | null } = {}): Promise<string> {
    const rows = await this.rows(`SELECT state FROM {s}.job_fail($1, $2, $3, $4::interval, $5, $6::text)`, [
      job.id,
      job.leaseToken,
      error,
      interval(opts.retryInMs),
      opts.dead ?? false,
      opts.log ?? null,
    ]);
    return rows[0].state;
  }

  /** What the job's handlers logged, one entry per attempt that logged
   * something, oldest first. PM107 for an unknown job. */
  async jobLogs(id: number): Promise<JobLog[]> {
    const rows = await this.rows(`SELECT attempt, at, outcome, log FROM {s}.job_logs($1)`, [id]);
    return rows.map((r) => ({ attempt: r.attempt, at: r.at, outcome: r.outcome, log: r.log }));
  }

  /** The step checkpoints the job recorded, in the order they completed. */
  async jobSteps(id: number): Promise<JobStep[]> {
    const rows = await this.rows(`SELECT name, attempt, at, output FROM {s}.job_steps($1)`, [id]);
    return rows.map((r) => ({ name: r.name, attempt: r.attempt, at: r.at, output: r.output }));
  }

  /** Records step name of the held job as completed with output (JSON), at
   * once, under its lease: PM106 if the lease was lost, PM122 for a bad
   * name, PM123 for an output over 64 KiB. */
  async saveStep(job: Job, name: string, output?: unknown): Promise<void> {
    await this.rows(`SELECT {s}.job_step_save($1, $2, $3, $4::jsonb)`, [
      job.id,
      job.leaseToken,
      name,
      output === undefined || output === null ? null : JSON.stringify(output),
    ]);
  }

  /** Runs fn once per job, across attempts (the Go API's pgmsg.Step): when
   * step name of the held job completed in an earlier attempt (or earlier
   * in this one) it returns the stored output without calling fn;
   * otherwise it awaits fn() and records its result (JSON; undefined is
   * stored as null) at once with saveStep, under the job's lease, so that
   * an attempt that fails later resumes after it. The job's steps are read
   * once per attempt (jobSteps). A bad name is PM122 before fn runs; a
   * lost lease PM106 and an output over 64 KiB PM123, after fn ran (its
   * result is then not recorded). A step is at least once: make fn's side
   * effects idempotent. */
  async step<T>(job: Job, name: string, fn: () => Promise<T> | T): Promise<T> {
    if (typeof name !== "string" || !STEP_NAME.test(name)) {
      throw new PgmsgError(
        "PM122",
        `invalid step name ${JSON.stringify(name)}: 1 to ${STEP_NAME_MAX_BYTES} of A-Z a-z 0-9 . _ - : /`,
      );
    }
    if (!job.stepsDone) {
      job.stepsDone = new Map((await this.jobSteps(job.id)).map((s) => [s.name, s.output]));
    }
    if (job.stepsDone.has(name)) return job.stepsDone.get(name) as T;
    const out = await fn();
    await this.saveStep(job, name, out);
    job.stepsDone.set(name, out);
    return out;
  }

  /** Heartbeat: the job's lease ends leaseMs (default the queue's) from now. */
  async extendJob(job: Job, leaseMs?: number): Promise<void> {
    const rows = await this.rows(`SELECT {s}.job_extend($1, $2, $3::interval) AS expires`, [job.id, job.leaseToken, interval(leaseMs)]);
    job.leaseExpiresAt = rows[0].expires;
  }

  /** Extends every held job of jobs; returns the ids still held. */
  async extendJobs(jobs: Job[], leaseMs?: number): Promise<number[]> {
    if (jobs.length === 0) return [];
    const rows = await this.rows(`SELECT id FROM {s}.job_extend_many($1::bigint[], $2::bigint[], $3::interval)`, [
      jobs.map((j) => j.id),
      jobs.map((j) => j.leaseToken),
      interval(leaseMs),
    ]);
    return rows.map((r) => num(r.id));
  }

  // Administration -------------------------------------------------------------

  /** Creates a topic (topic_create); config holds settings such as
   * retention_ms (docs/sql-api.md). PM002 topic_exists if it exists, unless
   * existOk: then the existing topic is returned unchanged. */
  async createTopic(
    name: string,
    opts: { partitions?: number; config?: { [k: string]: unknown }; existOk?: boolean } = {},
  ): Promise<Topic> {
    try {
      const rows = await this.rows(`SELECT ${topicColumns} FROM {s}.topic_create($1, $2, $3::jsonb)`, [
        name,
        opts.partitions ?? 1,
        JSON.stringify(opts.config ?? {}),
      ]);
      return toTopic(rows[0]);
    } catch (e) {
      if (!(opts.existOk && e instanceof PgmsgError && e.codeName === "topic_exists")) throw e;
      const t = (await this.listTopics()).find((t) => t.name === name);
      if (!t) throw e;
      return t;
    }
  }

  /** Every topic, by name (topic_list). */
  async listTopics(): Promise<Topic[]> {
    return (await this.rows(`SELECT ${topicColumns} FROM {s}.topic_list()`, [])).map(toTopic);
  }

  /** The topic's partitions: offsets, record counts, sizes (topic_describe). */
  async describeTopic(name: string): Promise<TopicPartition[]> {
    const rows = await this.rows(
      `SELECT partition, start_offset, next_offset, records, segments, approx_bytes FROM {s}.topic_describe($1)`,
      [name],
    );
    return rows.map((r) => ({
      partition: r.partition,
      startOffset: num(r.start_offset),
      nextOffset: num(r.next_offset),
      records: num(r.records),
      segments: r.segments,
      approxBytes: num(r.approx_bytes),
    }));
  }

  /** Drops the topic, its records and groups (topic_delete). A topic with
   * records or groups needs force (else PM017 topic_not_empty). */
  async deleteTopic(name: string, opts: { force?: boolean } = {}): Promise<void> {
    await this.rows(`SELECT {s}.topic_delete($1, p_force => $2)`, [name, opts.force ?? false]);
  }

  /** One row per group and partition with its lag (group_list); both filters optional. */
  async listGroups(opts: { topic?: string; group?: string } = {}): Promise<GroupPartition[]> {
    const rows = await this.rows(
      `SELECT topic, group_name, partition, next_offset, end_offset, lag, committed_at FROM {s}.group_list($1, $2)`,
      [opts.topic ?? null, opts.group ?? null],
    );
    return rows.map((r) => ({
      topic: r.topic,
      group: r.group_name,
      partition: r.partition,
      nextOffset: num(r.next_offset),
      endOffset: num(r.end_offset),
      lag: num(r.lag),
      committedAt: r.committed_at,
    }));
  }

  /** Moves the group's cursors (one partition or all) to "earliest",
   * "latest", an offset or a time (group_reset). Claims in progress are fenced. */
  async resetGroup(topic: string, group: string, to: string, opts: { partition?: number } = {}): Promise<GroupPartition[]> {
    const rows = await this.rows(`SELECT partition, next_offset FROM {s}.group_reset($1, $2, $3, $4::int)`, [
      topic,
      group,
      to,
      opts.partition ?? null,
    ]);
    return rows.map((r) => ({ topic, group, partition: r.partition, nextOffset: num(r.next_offset) }));
  }

  /** Removes the group's cursors; false if it did not exist (group_delete). */
  async deleteGroup(topic: string, group: string): Promise<boolean> {
    return (await this.rows(`SELECT {s}.group_delete($1, $2) AS deleted`, [topic, group]))[0].deleted;
  }

  /** Creates a queue (queue_create) with the settings given, the rest
   * default. PM102 queue_exists if it exists, unless existOk (then the
   * existing queue is returned unchanged). */
  async createQueue(name: string, opts: QueueSettings & { existOk?: boolean } = {}): Promise<Queue> {
    const args: unknown[] = [name, opts.existOk ?? false];
    const named = queueSettings.map(([opt, arg, cast]) => {
      const v = opts[opt];
      args.push(v === undefined || v === null ? null : cast === "interval" ? interval(v) : v);
      return `p_${arg} => $${args.length}::${cast}`;
    });
    const rows = await this.rows(
      `SELECT ${queueColumns} FROM {s}.queue_create($1, p_if_not_exists => $2, ${named.join(", ")})`,
      args,
    );
    return toQueue(rows[0]);
  }

  /** Every queue with its settings, by name (queue_list). */
  async listQueues(): Promise<Queue[]> {
    return (await this.rows(`SELECT ${queueColumns} FROM {s}.queue_list()`, [])).map(toQueue);
  }

  /** The queue's job counts by state (queue_stats). */
  async describeQueue(name: string): Promise<QueueStats> {
    const r = (
      await this.rows(
        `SELECT queue, available, scheduled, running, retrying, dead, archived,
                CASE WHEN available > 0 THEN oldest_available_seconds END AS oldest, archived_last_minute
           FROM {s}.queue_stats($1)`,
        [name],
      )
    )[0];
    return {
      queue: r.queue,
      available: num(r.available),
      scheduled: num(r.scheduled),
      running: num(r.running),
      retrying: num(r.retrying),
      dead: num(r.dead),
      archived: num(r.archived),
      oldestAvailableSeconds: r.oldest,
      archivedLastMinute: num(r.archived_last_minute),
    };
  }

  /** Removes the queue with its jobs and archive (queue_delete). A queue
   * with jobs needs force (else PM108 queue_not_empty). */
  async deleteQueue(name: string, opts: { force?: boolean } = {}): Promise<void> {
    await this.rows(`SELECT {s}.queue_delete($1, $2)`, [name, opts.force ?? false]);
  }

  /** Puts the job back without counting the attempt (0: a release). */
  async snooze(job: Job, delayMs = 0, opts: { log?: string | null } = {}): Promise<void> {
    await this.rows(`SELECT {s}.job_snooze($1, $2, $3::interval, $4::text)`, [job.id, job.leaseToken, interval(delayMs), opts.log ?? null]);
  }
}
