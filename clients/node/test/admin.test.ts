import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Pool } from "pg";

import { Pgmsg, PgmsgError } from "../src";
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

async function rejects(p: Promise<unknown>, codeName: string): Promise<PgmsgError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof PgmsgError, `a PgmsgError, not ${e}`);
    assert.equal(e.codeName, codeName, e.message);
    return e;
  }
  assert.fail(`expected ${codeName}`);
}

describe("administration", () => {
  test("topics: create, list, describe, delete (force when not empty)", async () => {
    const t = env.name("t");
    const made = await c.createTopic(t, { partitions: 3, config: { retention_ms: 3600000 } });
    assert.deepEqual([made.name, made.partitions, made.config.retention_ms], [t, 3, 3600000]);
    await rejects(c.createTopic(t), "topic_exists");
    assert.equal((await c.createTopic(t, { partitions: 1, existOk: true })).partitions, 3, "existOk returns it as it is");
    assert.ok((await c.listTopics()).some((x) => x.name === t));

    await c.publish(t, [{ value: "a", key: "k" }, { value: "b", key: "k" }]);
    const parts = await c.describeTopic(t);
    assert.deepEqual(parts.map((p) => p.partition), [0, 1, 2]);
    assert.equal(parts.reduce((n, p) => n + p.records, 0), 2);

    const e = await rejects(c.deleteTopic(t), "topic_not_empty");
    assert.equal(e.code, "PM017");
    assert.ok((await c.listTopics()).some((x) => x.name === t), "a refused delete deletes nothing");
    await c.deleteTopic(t, { force: true });
    assert.ok(!(await c.listTopics()).some((x) => x.name === t));
    await rejects(c.describeTopic(t), "unknown_topic");

    const empty = env.name("t");
    await c.createTopic(empty);
    await c.deleteTopic(empty); // nothing in it: no force needed
    assert.ok(!(await c.listTopics()).some((x) => x.name === empty));
  });

  test("groups: list with lag, reset, delete", async () => {
    const t = env.name("t");
    await c.createTopic(t);
    await c.publish(t, [{ value: "a" }, { value: "b" }, { value: "c" }]);
    const claim = await c.claim(t, "billing", { maxRecords: 2 });
    assert.ok(claim);
    await c.commit(claim);
    const rows = await c.listGroups({ topic: t });
    assert.deepEqual(rows.map((g) => [g.group, g.partition, g.nextOffset, g.endOffset, g.lag]), [["billing", 0, 2, 3, 1]]);
    assert.equal((await c.listGroups({ topic: t, group: "billing" }))[0].lag, 1);
    assert.deepEqual(
      (await c.resetGroup(t, "billing", "earliest")).map((g) => [g.topic, g.group, g.partition, g.nextOffset]),
      [[t, "billing", 0, 0]],
    );
    assert.equal((await c.resetGroup(t, "billing", "latest", { partition: 0 }))[0].nextOffset, 3);
    assert.equal((await c.resetGroup(t, "billing", "1"))[0].nextOffset, 1);
    await rejects(c.resetGroup(t, "nobody", "earliest"), "unknown_group");
    assert.equal(await c.deleteGroup(t, "billing"), true);
    assert.equal(await c.deleteGroup(t, "billing"), false);
    assert.deepEqual(await c.listGroups({ topic: t }), []);
  });

  test("queues: create with settings, list, describe, delete (force when not empty)", async () => {
    const q = env.name("q");
    const made = await c.createQueue(q, { maxAttempts: 3, leaseMs: 120000, rateLimit: 50, maxRunning: 10 });
    assert.deepEqual(
      [made.name, made.maxAttempts, made.leaseMs, made.rateLimit, made.maxRunning, made.maxDepth, made.paused],
      [q, 3, 120000, 50, 10, null, false],
    );
    await rejects(c.createQueue(q), "queue_exists");
    assert.equal((await c.createQueue(q, { existOk: true, maxAttempts: 9 })).maxAttempts, 3);
    assert.ok((await c.listQueues()).some((x) => x.name === q));

    let stats = await c.describeQueue(q);
    assert.deepEqual([stats.queue, stats.available, stats.oldestAvailableSeconds], [q, 0, null]);
    await c.enqueue(q, "1");
    stats = await c.describeQueue(q);
    assert.equal(stats.available, 1);
    assert.notEqual(stats.oldestAvailableSeconds, null);

    const e = await rejects(c.deleteQueue(q), "queue_not_empty");
    assert.equal(e.code, "PM108");
    await c.deleteQueue(q, { force: true });
    assert.ok(!(await c.listQueues()).some((x) => x.name === q));
    await rejects(c.describeQueue(q), "unknown_queue");
  });
});
