import asyncio
import unittest
from datetime import timedelta

import psycopg

from pgmsg import PgmsgError, Record
from pgmsg.aio import AsyncClient, AsyncConsumer, AsyncWorker

from . import env


async def wait_until(pred, what, timeout=60.0):
    """env.wait_until for coroutines; the timeout only bounds a broken run."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.conn = await psycopg.AsyncConnection.connect(env.URL, autocommit=True)
        self.c = AsyncClient(self.conn, env.SCHEMA)

    async def asyncTearDown(self):
        await self.conn.close()

    async def sql(self, text, *args):
        cur = await self.conn.execute(text.replace("{s}", '"' + env.SCHEMA + '"'), args)
        return await cur.fetchall()

    async def listening(self, tag):
        return bool(await self.sql(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN %%' AND state = 'idle'",
            tag))

    async def topic(self):
        t = env.name("t")
        await self.sql("SELECT * FROM {s}.topic_create(%s, 1)", t)
        return t

    async def test_round_trip_and_errors(self):
        t = await self.topic()
        await self.c.publish(t, [Record(b"a", key=b"k", headers={"h": b"\x01"}), Record(b"b")])
        claim = await self.c.claim(t, "g")
        self.assertEqual([(r.offset, r.value, r.headers) for r in claim.records],
                         [(0, b"a", {"h": b"\x01"}), (1, b"b", None)])
        await self.c.extend(claim)
        self.assertEqual(await self.c.commit(claim), 2)
        with self.assertRaises(PgmsgError) as cm:
            await self.c.release(claim)
        self.assertEqual(cm.exception.code, "PM009")

        q = env.name("q")
        r = await self.c.enqueue(q, b"job", kind="k")
        jobs = await self.c.claim_jobs(q)
        self.assertEqual([j.id for j in jobs], [r.id])
        await self.c.extend_job(jobs[0])
        await self.c.complete(jobs[0], [1, 2])
        with self.assertRaises(PgmsgError) as cm:
            await self.c.fail(jobs[0], "late")
        self.assertEqual(cm.exception.code, "PM106")
        self.assertEqual(await self.sql("SELECT state, result FROM {s}.job_get(%s)", r.id), [("completed", [1, 2])])

    async def test_consumer_in_order_redelivery_and_wake_up(self):
        t = await self.topic()
        tag = env.name("py-async")
        seen, failed = [], []
        cons = AsyncConsumer(env.tagged_url(tag), t, "g", schema=env.SCHEMA, max_records=3,
                             retry_backoff=0.01, poll_interval=3600)

        async def handle(claim):
            vals = [int(r.value) for r in claim.records]
            if 3 in vals and not failed:
                failed.append(vals)
                raise RuntimeError("first delivery fails")
            seen.extend(vals)
            if len(seen) == 6:
                cons.stop()

        async with cons:
            task = asyncio.create_task(cons.run(handle))
            # Idle and listening first: with an hour's poll interval only
            # the publish notification can wake it.
            await wait_until(lambda: self.listening(tag), "the consumer to listen")
            await self.c.publish(t, [Record(str(i).encode()) for i in range(6)])
            await asyncio.wait_for(task, 60)
        self.assertEqual(failed, [[3, 4, 5]])
        self.assertEqual(seen, list(range(6)))

    async def test_worker_heartbeat_fail_and_wake_up(self):
        q = env.name("q")
        tag = env.name("py-async")
        done = []
        w = AsyncWorker(env.tagged_url(tag), q, schema=env.SCHEMA, lease=timedelta(seconds=3), poll_interval=3600)

        async def handle(job):
            job.log("attempt %d", job.attempt)
            if job.kind == "boom":
                raise ValueError("boom")
            await self.c.save_step(job, "slow", [1])
            # Slow: wait until the heartbeat moved the lease.
            await wait_until(lambda: self._extended(job), "the heartbeat to extend the lease")
            done.append(job.id)
            w.stop()
            return {"ok": True}

        async with w:
            task = asyncio.create_task(w.run(handle))
            await wait_until(lambda: self.listening(tag), "the worker to listen")
            bad = await self.c.enqueue(q, b"x", kind="boom", max_attempts=1, priority=1)
            ok = await self.c.enqueue(q, b"y")
            await asyncio.wait_for(task, 60)
        self.assertEqual(done, [ok.id])
        self.assertEqual(await self.sql("SELECT state, result FROM {s}.job_get(%s)", ok.id), [("completed", {"ok": True})])
        rows = await self.sql("SELECT state, errors -> -1 ->> 'error' FROM {s}.job_get(%s)", bad.id)
        self.assertEqual(rows, [("dead", "ValueError: boom")])
        self.assertEqual([(l.outcome, l.log) for l in await self.c.job_logs(ok.id)], [("completed", "attempt 1\n")])
        self.assertEqual([(l.outcome, l.log) for l in await self.c.job_logs(bad.id)], [("dead", "attempt 1\n")])
        self.assertEqual([(s.name, s.output) for s in await self.c.job_steps(ok.id)], [("slow", [1])])

    async def test_step_runs_once_across_attempts(self):
        q = env.name("q")
        r = await self.c.enqueue(q, b"s")
        ran = []

        async def charge():
            ran.append("charge")
            return {"id": 7}

        jobs = await self.c.claim_jobs(q)
        self.assertEqual(await self.c.step(jobs[0], "charge", charge), {"id": 7})
        self.assertEqual(await self.c.step(jobs[0], "sync", lambda: ran.append("sync") or 1), 1)
        await self.c.fail(jobs[0], "crash", retry_in=timedelta(0))
        jobs = await self.c.claim_jobs(q)
        self.assertEqual([j.id for j in jobs], [r.id])
        self.assertEqual(await self.c.step(jobs[0], "charge", charge), {"id": 7})
        self.assertEqual(await self.c.step(jobs[0], "sync", lambda: ran.append("sync") or 1), 1)
        self.assertEqual(ran, ["charge", "sync"], "the retry ran neither step again")
        with self.assertRaises(PgmsgError) as cm:
            await self.c.step(jobs[0], "", charge)
        self.assertEqual(cm.exception.code, "PM122")
        self.assertEqual([(s.name, s.attempt) for s in await self.c.job_steps(r.id)], [("charge", 1), ("sync", 1)])

    async def test_polling_when_the_listener_is_lost(self):
        t = await self.topic()
        tag = env.name("py-async-lost")
        got = []
        cons = AsyncConsumer(env.tagged_url(tag), t, "g", schema=env.SCHEMA, poll_interval=0.2)

        async def handle(claim):
            got.extend(r.value for r in claim.records)
            cons.stop()

        async with cons:
            task = asyncio.create_task(cons.run(handle))
            await wait_until(lambda: self.listening(tag), "the consumer to listen")
            killed = await self.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                    " WHERE application_name = %s AND query LIKE 'LISTEN %%'", tag)
            self.assertEqual(killed, [(True,)])
            await self.c.publish(t, [Record(b"found by polling")])
            await asyncio.wait_for(task, 60)
        self.assertEqual(got, [b"found by polling"])

    async def test_stop_ends_an_idle_wait(self):
        t = await self.topic()
        tag = env.name("py-async-stop")
        async with AsyncConsumer(env.tagged_url(tag), t, "g", schema=env.SCHEMA, poll_interval=3600) as cons:
            task = asyncio.create_task(cons.run(lambda claim: asyncio.sleep(0)))
            await wait_until(lambda: self.listening(tag), "the consumer to listen")
            cons.stop()
            await asyncio.wait_for(task, 60)  # not the hour-long wait

    async def _extended(self, job):
        return bool(await self.sql("SELECT 1 FROM {s}.job_get(%s) WHERE lease_expires_at > %s",
                                   job.id, job.lease_expires_at))


if __name__ == "__main__":
    unittest.main()
