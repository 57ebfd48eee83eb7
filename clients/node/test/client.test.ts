import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Pool } from "pg";

import { Consumer, jobLogText, Pgmsg, PgmsgError, Worker } from "../src";
import * as env from "./env";

let pool: Pool;
let c: Pgmsg;

before(() => {
  pool = env.pool();
  c = new Pgmsg(pool, { schema: env.SCHEMA });
});
after(async () => {
  await pool.end();
});

async function topic(partitions = 1): Promise<string> {
  const t = env.name("t");
  await env.sql(pool, "SELECT * FROM {s}.topic_create($1, $2)", [t, partitions]);
  return t;
}

async function rejects(p: Promise<unknown>, code: string): Promise<PgmsgError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof PgmsgError, `a PgmsgError, not ${e}`);
    assert.equal(e.code, code, e.message);
    return e;
  }
  assert.fail(`expected ${code}`);
}

describe("the log", () => {
  test("publish, claim, commit round trip", async () => {
    const t = await topic();
    const ts = new Date("2026-01-02T03:04:05.678Z");
    const res = await c.publish(t, [
      { value: "v0", key: "k", headers: { trace: Buffer.from([0, 255]), n: Buffer.from("1") }, timestamp: ts },
      { value: Buffer.from([0, 1, 255]) },
      { value: null, key: "k" },
    ]);
    assert.deepEqual(res.map((r) => [r.partition, r.baseOffset, r.recordCount]), [[0, 0, 3]]);
    const claim = await c.claim(t, "g");
    assert.ok(claim);
    assert.deepEqual(
      claim.records.map((r) => [r.offset, r.key?.toString() ?? null, r.value, r.headers]),
      [
        [0, "k", Buffer.from("v0"), { trace: Buffer.from([0, 255]), n: Buffer.from("1") }],
        [1, null, Buffer.from([0, 1, 255]), null],
        [2, "k", null, null],
      ],
    );
    assert.equal(claim.records[0].timestamp.getTime(), ts.getTime());
    assert.equal(await c.commit(claim), 3);
    assert.equal(await c.claim(t, "g"), null, "everything was committed");
  });

  test("release redelivers; extend moves the expiry", async () => {
    const t = await topic();
    await c.publish(t, [{ value: "a" }, { value: "b" }]);
    const claim = (await c.claim(t, "g", { leaseMs: 5000 }))!;
    const before = claim.expiresAt.getTime();
    await c.extend(claim, 300000);
    assert.ok(claim.expiresAt.getTime() > before);
    await c.release(claim);
    const again = (await c.claim(t, "g"))!;
    assert.deepEqual(again.records.map((r) => r.value?.toString()), ["a", "b"]);
  });

  test("errors carry the PM code", async () => {
    const t = await topic();
    const e = await rejects(c.publish(env.name("missing"), [{ value: "x" }]), "PM001");
    assert.equal(e.codeName, "unknown_topic");
    assert.match(e.serverMessage, /missing/);
    await rejects(c.publish(t, []), "PM010");
    await c.publish(t, [{ value: "x" }]);
    const claim = (await c.claim(t, "g"))!;
    await c.commit(claim);
    assert.equal((await rejects(c.commit(claim), "PM009")).codeName, "claim_not_held");
  });

  test("publish in the caller's transaction", async () => {
    const t = await topic();
    const conn = await pool.connect();
    try {
      const tx = c.with(conn);
      await conn.query("BEGIN");
      await tx.publish(t, [{ value: "rolled back" }]);
      await conn.query("ROLLBACK");
      await conn.query("BEGIN");
      await tx.publish(t, [{ value: "committed" }]);
      await conn.query("COMMIT");
    } finally {
      conn.release();
    }
    const claim = (await c.claim(t, "g"))!;
    assert.deepEqual(claim.records.map((r) => [r.offset, r.value?.toString()]), [[0, "committed"]]);
  });
});

describe("Consumer", () => {
  test("commits in order and redelivers after a handler error", async () => {
    const t = await topic();
    await c.publish(t, Array.from({ length: 10 }, (_, i) => ({ value: String(i) })));
    const seen: number[] = [];
    const failed: number[][] = [];
    const cons = new Consumer(pool, t, "g", { schema: env.SCHEMA, maxRecords: 4, retryBackoffMs: 10, listen: false, pollIntervalMs: 50 });
    await cons.run(async (claim) => {
      const vals = claim.records.map((r) => Number(r.value!.toString()));
      if (vals.includes(4) && failed.length === 0) {
        failed.push(vals);
        throw new Error("first delivery of the batch with 4 fails");
      }
      seen.push(...vals);
      if (seen.length === 10) cons.stop();
    });
    cons.close();
    assert.deepEqual(failed, [[4, 5, 6, 7]]);
    assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const rows = await env.sql(pool, "SELECT next_offset FROM {s}.group_list($1, 'g')", [t]);
    assert.deepEqual(rows.map((r) => Number(r.next_offset)), [10]);
  });

  // JavaScript dates hold milliseconds: the comparisons truncate the
  // database's microseconds, else the first expiry would look extended.
  test("the heartbeat extends a slow handler's claim", async () => {
    const t = await topic();
    await c.publish(t, [{ value: "slow" }]);
    const cons = new Consumer(pool, t, "g", { schema: env.SCHEMA, leaseMs: 3000, listen: false });
    const handled = await cons.runOnce(async (claim) => {
      const first = claim.expiresAt;
      await env.waitUntil(
        async () => (await env.sql(pool, "SELECT 1 FROM {s}.group_list($1, 'g') WHERE date_trunc('milliseconds', claim_expires_at) > $2", [t, first])).length > 0,
        "the heartbeat to extend the claim",
      );
    });
    assert.equal(handled, true);
    const rows = await env.sql(pool, "SELECT next_offset, claim_expires_at FROM {s}.group_list($1, 'g')", [t]);
    assert.deepEqual(rows.map((r) => [Number(r.next_offset), r.claim_expires_at]), [[1, null]], "committed after the extended lease");
  });

  test("LISTEN wakes an idle consumer", async () => {
    const t = await topic();
    const tag = env.name("node-listen");
    const p = env.pool(tag);
    // Polling once an hour: only the notification can wake it in time.
    const cons = new Consumer(p, t, "g", { schema: env.SCHEMA, pollIntervalMs: 3_600_000 });
    const got: string[] = [];
    const running = cons.run(async (claim) => {
      got.push(...claim.records.map((r) => r.value!.toString()));
      cons.stop();
    });
    await env.waitUntil(() => env.listening(pool, tag), "the consumer to listen");
    await c.publish(t, [{ value: "wake" }]);
    await running;
    cons.close();
    await p.end();
    assert.deepEqual(got, ["wake"]);
  });
});

test("polling finds records when the listener is lost", { timeout: 60_000 }, async () => {
  const t = await topic();
  const tag = env.name("node-lost");
  const p = env.pool(tag);
  const cons = new Consumer(p, t, "g", { schema: env.SCHEMA, pollIntervalMs: 200, logger: () => undefined });
  const got: string[] = [];
  const running = cons.run((claim) => {
    got.push(...claim.records.map((r) => r.value!.toString()));
    cons.stop();
  });
  await env.waitUntil(() => env.listening(pool, tag), "the consumer to listen");
  const killed = await pool.query(
    "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'",
    [tag],
  );
  assert.deepEqual(killed.rows, [{ ok: true }]);
  await c.publish(t, [{ value: "found by polling" }]);
  await running;
  cons.close();
  await p.end();
  assert.deepEqual(got, ["found by polling"]);
});

test("stop() ends an idle consumer's wait", { timeout: 60_000 }, async () => {
  const t = await topic();
  const tag = env.name("node-stop");
  const p = env.pool(tag);
  const cons = new Consumer(p, t, "g", { schema: env.SCHEMA, pollIntervalMs: 3_600_000 });
  const running = cons.run(() => undefined);
  await env.waitUntil(() => env.listening(pool, tag), "the consumer to listen");
  cons.stop();
  await running; // not the hour-long wait: the test's own timeout would end it
  cons.close();
  await p.end();
});

describe("the queue", () => {
  async function job(id: number) {
    return (await env.sql(pool, "SELECT state, result, errors, kind, tags, metadata FROM {s}.job_get($1)", [id]))[0];
  }

  test("a sequence runs one job at a time, in order", async () => {
    const q = env.name("q");
    const many = await c.enqueueMany(q, [{ payload: "1", sequenceKey: "acct-1" }, { payload: "2", sequenceKey: "acct-1" }]);
    assert.deepEqual(many.map((m) => m.state), ["available", "pending"], "the second waits behind the first");
    let jobs = await c.claimJobs(q, { limit: 10 });
    assert.deepEqual(jobs.map((j) => j.id), [many[0].id]);
    await c.complete(jobs[0]);
    jobs = await c.claimJobs(q, { limit: 10 });
    assert.deepEqual(jobs.map((j) => j.id), [many[1].id], "the completion let the next run");
  });

  test("a batch enqueues its callback once every job completed", async () => {
    const q = env.name("q");
    const cbq = env.name("cb");
    const res = await c.enqueueBatch(q, [{ payload: "1" }, { payload: "2" }], {
      onComplete: { kind: "done", queue: cbq, args: { n: 7 } },
      onDiscard: { kind: "failed", queue: cbq },
    });
    assert.equal(res.jobs.length, 2);
    let b = await c.getBatch(res.id);
    assert.deepEqual([b.total, b.available, b.completed, b.finishedAt], [2, 2, 0, null]);
    const jobs = await c.claimJobs(q, { limit: 10 });
    await c.complete(jobs[0]);
    assert.equal((await c.getBatch(res.id)).completeJobId, null, "one job is left");
    await c.complete(jobs[1]);
    b = await c.getBatch(res.id);
    assert.equal(b.completed, 2);
    assert.notEqual(b.finishedAt, null);
    assert.equal(b.discardJobId, null);
    assert.deepEqual(b.onComplete?.args, { n: 7 });
    const cb = await job(b.completeJobId!);
    assert.deepEqual([cb.state, cb.kind], ["available", "done"]);
    assert.deepEqual(cb.metadata.batch, { id: res.id, callback: "complete", total: 2, completed: 2, cancelled: 0, dead: 0 });

    for (const spec of [{ queue: "x" }, { kind: "k", queue: "bad name" }]) {
      await rejects(c.enqueueBatch(q, [{ payload: "1" }], { onDiscard: spec as { kind: string } }), "PM120");
    }
    await rejects(c.enqueueBatch(q, []), "PM010");
    await rejects(c.getBatch(987654321), "PM121");
  });

  test("a limit key admits key_limit jobs of the key at a time", async () => {
    const q = env.name("q");
    await env.sql(pool, "SELECT name FROM {s}.queue_create($1, p_key_limit => 1)", [q]);
    const many = await c.enqueueMany(q, [
      { payload: "1", limitKey: "cust-1" },
      { payload: "2", limitKey: "cust-1" },
      { payload: "3", limitKey: "cust-2" },
    ]);
    assert.deepEqual(many.map((m) => m.state), ["available", "pending", "available"], "one job of a key at a time");
    let jobs = await c.claimJobs(q, { limit: 10 });
    assert.deepEqual(jobs.map((j) => j.id).sort((a, b) => a - b), [many[0].id, many[2].id]);
    await c.complete(jobs.find((j) => j.id === many[0].id)!);
    jobs = await c.claimJobs(q, { limit: 10 });
    assert.deepEqual(jobs.map((j) => j.id), [many[1].id], "the completion admitted the key's next");
  });

  test("a tenant enqueueing after another's backlog is served in turn", async () => {
    const q = env.name("q");
    const many = await c.enqueueMany(q, Array.from({ length: 5 }, () => ({ payload: "big", tenant: "big" })));
    const small = await c.enqueue(q, "small", { tenant: "small" });
    const jobs = await c.claimJobs(q, { limit: 2 });
    assert.deepEqual(jobs.map((j) => j.id), [many[0].id, small.id]);
    await rejects(c.enqueue(q, "x", { tenant: "has space" }), "PM118");
  });

  test("enqueue, claim, complete, fail", async () => {
    const q = env.name("q");
    const r = await c.enqueue(q, '{"to":"ada"}', { kind: "welcome", priority: 5, uniqueKey: "u1", tags: ["eu"], metadata: { by: "ann" } });
    assert.equal(r.duplicate, false);
    const dup = await c.enqueue(q, "other", { uniqueKey: "u1" });
    assert.deepEqual([dup.id, dup.duplicate], [r.id, true]);
    const many = await c.enqueueMany(q, [{ payload: "a" }, { payload: "b", delayMs: 3_600_000 }]);
    assert.deepEqual(many.map((m) => m.state), ["available", "scheduled"]);

    const jobs = await c.claimJobs(q, { limit: 10, worker: "node" });
    assert.deepEqual(jobs.map((j) => j.id), [r.id, many[0].id], "priority first; the delayed job waits");
    assert.deepEqual([jobs[0].kind, jobs[0].payload.toString(), jobs[0].attempt], ["welcome", '{"to":"ada"}', 1]);
    await c.extendJob(jobs[0], 60000);
    assert.deepEqual((await c.extendJobs(jobs)).sort(), jobs.map((j) => j.id).sort());
    await c.complete(jobs[0], { sent: true });
    assert.equal(await c.fail(jobs[1], "smtp down", { retryInMs: 3_600_000 }), "retrying");

    const done = await job(r.id);
    assert.deepEqual([done.state, done.result, done.kind, done.tags, done.metadata], ["completed", { sent: true }, "welcome", ["eu"], { by: "ann" }]);
    const retrying = await job(many[0].id);
    assert.equal(retrying.state, "retrying");
    assert.equal(retrying.errors.at(-1).error, "smtp down");

    assert.equal((await rejects(c.complete(jobs[0]), "PM106")).codeName, "job_not_held");
    await rejects(c.enqueue(q, "x", { priority: 70000 }), "PM004");
  });

  test("Worker completes and fails", async () => {
    const q = env.name("q");
    const ok = await c.enqueue(q, "1", { kind: "ok" });
    const bad = await c.enqueue(q, "2", { kind: "boom", maxAttempts: 1 });
    const w = new Worker(pool, q, { schema: env.SCHEMA, batch: 2, listen: false });
    const n = await w.runOnce(async (j) => {
      if (j.kind === "boom") throw new TypeError("no");
      return { payload: j.payload.toString() };
    });
    assert.equal(n, 2);
    assert.deepEqual([(await job(ok.id)).state, (await job(ok.id)).result], ["completed", { payload: "1" }]);
    const dead = await job(bad.id);
    assert.equal(dead.state, "dead", "its only attempt failed");
    assert.equal(dead.errors.at(-1).error, "TypeError: no");
  });

  test("Worker keeps logs and steps", async () => {
    const q = env.name("q");
    const ok = await c.enqueue(q, "1", { kind: "ok" });
    const bad = await c.enqueue(q, "2", { kind: "boom", maxAttempts: 1 });
    const quiet = await c.enqueue(q, "3", { kind: "quiet" });
    const w = new Worker(pool, q, { schema: env.SCHEMA, batch: 3, listen: false });
    assert.equal(
      await w.runOnce(async (j) => {
        if (j.kind === "quiet") return null;
        j.log.push(`handling ${j.payload.toString()}`);
        if (j.kind === "boom") throw new TypeError("no");
        await c.saveStep(j, "charge", { id: 7 });
        return "done";
      }),
      3,
    );
    assert.deepEqual((await c.jobLogs(ok.id)).map((l) => [l.attempt, l.outcome, l.log]), [[1, "completed", "handling 1\n"]]);
    assert.deepEqual((await c.jobLogs(bad.id)).map((l) => [l.outcome, l.log]), [["dead", "handling 2\n"]]);
    assert.deepEqual(await c.jobLogs(quiet.id), []);
    assert.deepEqual((await c.jobSteps(ok.id)).map((s) => [s.name, s.attempt, s.output]), [["charge", 1, { id: 7 }]]);
    await rejects(c.jobLogs(1e12), "PM107");

    await c.enqueue(q, "held");
    const [held] = await c.claimJobs(q);
    assert.equal((await rejects(c.saveStep(held, "bad name", 1), "PM122")).codeName, "invalid_step_name");
    assert.equal((await rejects(c.saveStep(held, "big", "x".repeat(70000)), "PM123")).codeName, "step_too_large");
    await rejects(c.saveStep({ ...held, leaseToken: held.leaseToken - 1 }, "late", 1), "PM106");

    held.log = Array(10).fill("é".repeat(100));
    const text = jobLogText(held, 300)!;
    assert.ok(Buffer.byteLength(text) <= 300);
    assert.ok(text.endsWith("[pgmsg: log truncated at 300 bytes]\n"), text);
  });

  test("a step runs once per job, across attempts", async () => {
    const q = env.name("q");
    const r = await c.enqueue(q, "s");
    const ran: string[] = [];
    const attempt = async (crash: boolean) => {
      const jobs = await c.claimJobs(q);
      assert.deepEqual(jobs.map((j) => j.id), [r.id]);
      const j = jobs[0];
      const charged = await c.step(j, "charge", async () => {
        ran.push("charge");
        return { id: 7 };
      });
      // Again in the same attempt: the stored output, fn not called.
      assert.deepEqual(await c.step(j, "charge", () => ran.push("charge again")), { id: 7 });
      assert.equal(await c.step(j, "noop", () => void ran.push("noop")), crash ? undefined : null);
      if (crash) {
        await c.fail(j, "crash after charge", { retryInMs: 0 });
        return [charged, null];
      }
      const shipped = await c.step(j, "ship/1", () => (ran.push("ship"), charged.id + 1));
      await c.complete(j);
      return [charged, shipped];
    };
    assert.deepEqual(await attempt(true), [{ id: 7 }, null]);
    assert.deepEqual(ran, ["charge", "noop"]);
    // The retry gets the first attempt's outputs and runs only the rest.
    assert.deepEqual(await attempt(false), [{ id: 7 }, 8]);
    assert.deepEqual(ran, ["charge", "noop", "ship"]);
    assert.deepEqual(
      (await c.jobSteps(r.id)).map((s) => [s.name, s.attempt, s.output]),
      [
        ["charge", 1, { id: 7 }],
        ["noop", 1, null],
        ["ship/1", 2, 8],
      ],
    );

    // A bad name is refused before fn runs; a lost lease after it, and the
    // step is not taken as done.
    await c.enqueue(q, "held");
    const [held] = await c.claimJobs(q);
    await rejects(c.step(held, "bad name", () => ran.push("bad")), "PM122");
    assert.deepEqual(ran, ["charge", "noop", "ship"]);
    held.leaseToken -= 1;
    await rejects(c.step(held, "late", () => 1), "PM106");
    assert.ok(!held.stepsDone!.has("late"));
  });

  test("the heartbeat extends a slow job's lease", async () => {
    const q = env.name("q");
    const j = await c.enqueue(q, "slow");
    const w = new Worker(pool, q, { schema: env.SCHEMA, leaseMs: 3000, listen: false });
    assert.equal(
      await w.runOnce(async (held) => {
        await env.waitUntil(
          async () => (await env.sql(pool, "SELECT 1 FROM {s}.job_get($1) WHERE date_trunc('milliseconds', lease_expires_at) > $2", [held.id, held.leaseExpiresAt])).length > 0,
          "the heartbeat to extend the lease",
        );
        return "done";
      }),
      1,
    );
    const done = await job(j.id);
    assert.deepEqual([done.state, done.result], ["completed", "done"]);
  });

  test("LISTEN wakes an idle worker", async () => {
    const q = env.name("q");
    const tag = env.name("node-listen");
    const p = env.pool(tag);
    const w = new Worker(p, q, { schema: env.SCHEMA, pollIntervalMs: 3_600_000 });
    const got: string[] = [];
    const running = w.run(async (j) => {
      got.push(j.payload.toString());
      w.stop();
    });
    await env.waitUntil(() => env.listening(pool, tag), "the worker to listen");
    await c.enqueue(q, "wake");
    await running;
    w.close();
    await p.end();
    assert.deepEqual(got, ["wake"]);
  });
});
