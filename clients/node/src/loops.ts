// The consume and work loops: claim, handle, commit (or complete/fail),
// a heartbeat that extends the lease while the handler runs, and LISTEN
// wake-ups with polling as the fallback.

import type { Pool, PoolClient } from "pg";
import { Claim, Job, jobLogText, Pgmsg } from "./client";
import { PgmsgError } from "./errors";

/** Where the loops report what they survive (a failed handler, a lost claim). */
export type Logger = (message: string) => void;

const defaultLogger: Logger = (m) => console.warn("pgmsg: " + m);

/** LISTEN on the schema's channel on a connection of its own, taken from the
 * pool for the listener's life. Wake-ups only: the loops poll anyway, so a
 * lost connection costs latency, not correctness; the next wait opens it again. */
export class Listener {
  private conn: PoolClient | null = null;
  private pending = new Set<string>();
  private waiter: { payload: string; resolve: (woken: boolean) => void } | null = null;

  constructor(
    private readonly pool: Pool,
    private readonly pgmsg: Pgmsg,
    private readonly log: Logger = defaultLogger,
  ) {}

  private async open(): Promise<void> {
    const conn = await this.pool.connect();
    conn.on("notification", (n) => {
      // The Go client notifies "topic#partition" (names cannot hold "#"),
      // SQL publish() the topic: either wakes the topic's waiter.
      const p = (n.payload ?? "").split("#", 1)[0];
      if (this.waiter && this.waiter.payload === p) this.wake(true);
      else this.pending.add(p);
    });
    conn.on("error", (e) => {
      this.log(`listener lost (${e.message}); polling until it is back`);
      this.drop(conn, e);
    });
    await conn.query(this.pgmsg.listenSQL());
    this.conn = conn;
  }

  private drop(conn: PoolClient, err?: Error): void {
    if (this.conn === conn) this.conn = null;
    conn.release(err ?? true); // never back to the pool: it is LISTENing
  }

  private wake(woken: boolean): void {
    const w = this.waiter;
    this.waiter = null;
    w?.resolve(woken);
  }

  /** Waits up to timeoutMs for a notification with payload (a topic, or
   * "queue:<name>"), or one that came since the last wait; true if one did. */
  async wait(payload: string, timeoutMs: number): Promise<boolean> {
    if (this.conn === null) {
      try {
        await this.open();
      } catch (e) {
        this.log(`listener cannot connect (${(e as Error).message}); polling`);
      }
    }
    if (this.pending.delete(payload)) return true;
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => this.wake(false), timeoutMs);
      this.waiter = {
        payload,
        resolve: (woken) => {
          clearTimeout(timer);
          resolve(woken);
        },
      };
    });
  }

  /** Ends a wait in progress (stop). */
  interrupt(): void {
    this.wake(false);
  }

  close(): void {
    this.interrupt();
    if (this.conn) this.drop(this.conn);
  }
}

/** Calls beat every intervalMs while fn runs; a failed beat (the lease was
 * lost) is logged and stops the beats: the commit that follows reports it. */
async function withHeartbeat<T>(intervalMs: number, beat: () => Promise<unknown>, log: Logger, fn: () => Promise<T>): Promise<T> {
  let stopped = false;
  let running: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    running = beat().catch((e) => {
      log(`heartbeat failed: ${(e as Error).message}`);
      stopped = true;
      clearInterval(timer);
    });
  }, intervalMs);
  try {
    return await fn();
  } finally {
    if (!stopped) clearInterval(timer);
    await running; // no beat outlives the handler
  }
}

/** Extend a third of the way into a lease: two chances before it ends. */
function beatEvery(leaseMs: number): number {
  return Math.max(leaseMs / 3, 50);
}

interface LoopOptions {
  /** Wait at most this long (ms) between claims when idle. Default 1000. */
  pollIntervalMs?: number;
  /** LISTEN for wake-ups (one pool connection for the loop's life). Default true. */
  listen?: boolean;
  logger?: Logger;
}

abstract class Loop {
  protected readonly client: Pgmsg;
  protected readonly listener: Listener | null;
  protected readonly pollIntervalMs: number;
  protected readonly log: Logger;
  protected stopped = false;
  private sleeper: (() => void) | null = null;

  constructor(pool: Pool, schema: string | undefined, opts: LoopOptions) {
    this.client = new Pgmsg(pool, { schema });
    this.log = opts.logger ?? defaultLogger;
    this.listener = opts.listen === false ? null : new Listener(pool, this.client, this.log);
    this.pollIntervalMs = opts.pollIntervalMs ?? 1000;
  }

  /** Makes run() return after the claim in hand. */
  stop(): void {
    this.stopped = true;
    this.listener?.interrupt();
    this.sleeper?.();
  }

  /** Releases the listener's connection. */
  close(): void {
    this.listener?.close();
  }

  protected async sleep(ms: number): Promise<void> {
    if (this.stopped) return;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      this.sleeper = () => {
        clearTimeout(t);
        resolve();
      };
    });
    this.sleeper = null;
  }

  protected async idle(payload: string): Promise<void> {
    if (this.listener) await this.listener.wait(payload, this.pollIntervalMs);
    else await this.sleep(this.pollIntervalMs);
  }
}

export interface ConsumerOptions extends LoopOptions {
  schema?: string;
  maxRecords?: number;
  /** Claim lease in ms. Default 30000; extended every third of it while the handler runs. */
  leaseMs?: number;
  /** Wait after a failed handler before the records are claimed again (ms). Default 1000. */
  retryBackoffMs?: number;
  start?: string;
}

/** Consumes a topic as a consumer group. handler gets one partition's
 * records in offset order; returning commits them, throwing releases the
 * claim so that they come again, in order. Consumers of one group, in any
 * process or language, share the partitions: a claimed partition is nobody
 * else's until its claim ends. */
export class Consumer extends Loop {
  constructor(
    pool: Pool,
    readonly topic: string,
    readonly group: string,
    private readonly opts: ConsumerOptions = {},
  ) {
    super(pool, opts.schema, opts);
  }

  private async settle(what: (c: Claim) => Promise<unknown>, claim: Claim): Promise<void> {
    try {
      await what(claim);
    } catch (e) {
      // A claim that expired or was taken over is delivered again: not an error of the loop.
      if (e instanceof PgmsgError && (e.code === "PM008" || e.code === "PM009")) {
        this.log(`claim lost before its commit: ${e.message}`);
        return;
      }
      throw e;
    }
  }

  /** One claim, handled and committed (or released); false: nothing to read. */
  async runOnce(handler: (claim: Claim) => Promise<void> | void): Promise<boolean> {
    const c = this.client;
    const leaseMs = this.opts.leaseMs ?? 30000;
    const claim = await c.claim(this.topic, this.group, { maxRecords: this.opts.maxRecords, leaseMs, start: this.opts.start });
    if (claim === null) return false;
    try {
      await withHeartbeat(beatEvery(leaseMs), () => c.extend(claim, leaseMs), this.log, async () => handler(claim));
    } catch (e) {
      this.log(`handler failed on ${this.topic}[${claim.partition}]: ${(e as Error).message}`);
      await this.settle((cl) => c.release(cl), claim);
      await this.sleep(this.opts.retryBackoffMs ?? 1000);
      return true;
    }
    await this.settle((cl) => c.commit(cl), claim);
    return true;
  }

  /** Runs until stop(): claims while there is something to read, else waits
   * for a publish notification or pollIntervalMs. */
  async run(handler: (claim: Claim) => Promise<void> | void): Promise<void> {
    while (!this.stopped) {
      if (!(await this.runOnce(handler))) await this.idle(this.topic);
    }
  }
}

export interface WorkerOptions extends LoopOptions {
  schema?: string;
  /** Jobs claimed at a time, handled one after another. Default 1. */
  batch?: number;
  /** Lease in ms; default the queue's. Extended every third of it while a handler runs. */
  leaseMs?: number;
  workerId?: string;
}

/** Works a queue: handler's return value (any JSON value) completes the
 * job as its result; throwing fails the attempt with the error's text
 * (retried after the queue's backoff, dead after its last attempt). */
export class Worker extends Loop {
  constructor(
    pool: Pool,
    readonly queue: string,
    private readonly opts: WorkerOptions = {},
  ) {
    super(pool, opts.schema, opts);
  }

  /** One claim of up to batch jobs, each handled; returns how many. */
  async runOnce(handler: (job: Job) => Promise<unknown> | unknown): Promise<number> {
    const c = this.client;
    const jobs = await c.claimJobs(this.queue, { limit: this.opts.batch ?? 1, leaseMs: this.opts.leaseMs, worker: this.opts.workerId });
    const pending = [...jobs];
    for (const job of jobs) {
      let result: unknown;
      let err: unknown = null;
      // The beat extends every job of the claim not finished yet.
      await withHeartbeat(beatEvery(job.leaseMs), () => c.extendJobs(pending, this.opts.leaseMs), this.log, async () => {
        try {
          result = await handler(job);
        } catch (e) {
          err = e ?? new Error("handler threw " + String(e));
        }
      });
      pending.splice(pending.indexOf(job), 1);
      try {
        if (err === null) await c.complete(job, result, { log: jobLogText(job) });
        else await c.fail(job, err instanceof Error ? `${err.name}: ${err.message}` : String(err), { log: jobLogText(job) });
      } catch (e) {
        // A lost lease: the job runs again elsewhere.
        this.log(`finishing job ${job.id} failed: ${(e as Error).message}`);
      }
    }
    return jobs.length;
  }

  /** Runs until stop(): claims while jobs are claimable, else waits for an
   * enqueue notification or pollIntervalMs. The queue is created (default
   * settings) if it does not exist, as enqueue would. */
  async run(handler: (job: Job) => Promise<unknown> | unknown): Promise<void> {
    await this.client.ensureQueue(this.queue);
    while (!this.stopped) {
      if ((await this.runOnce(handler)) === 0) await this.idle("queue:" + this.queue);
    }
  }
}
