import json
import select
import threading
import unittest
from datetime import datetime, timedelta, timezone

import psycopg

import pgmsg
from pgmsg import JobSpec, PgmsgError, Record

from . import env


def _held(c, queue):
    """Enqueues a job into queue and claims it."""
    c.enqueue(queue, b"held")
    jobs = c.claim_jobs(queue)
    assert len(jobs) == 1
    return jobs[0]


class LogTest(unittest.TestCase):
    def setUp(self):
        self.conn = env.connect()
        self.addCleanup(self.conn.close)
        self.c = pgmsg.Client(self.conn, env.SCHEMA)

    def topic(self, partitions=1):
        t = env.name("t")
        env.sql(self.conn, "SELECT * FROM {s}.topic_create(%s, %s)", t, partitions)
        return t

    def test_publish_claim_commit_round_trip(self):
        t = self.topic()
        ts = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
        recs = [
            Record(b"v0", key=b"k", headers={"trace": b"\x00\xff", "n": b"1"}, timestamp=ts),
            Record(b"\x00binary\xff"),
            Record(None, key=b"k"),  # a tombstone
        ]
        res = self.c.publish(t, recs)
        self.assertEqual([(r.partition, r.base_offset, r.record_count) for r in res], [(0, 0, 3)])

        claim = self.c.claim(t, "g")
        self.assertIsNotNone(claim)
        got = [(r.offset, r.key, r.value, r.headers) for r in claim.records]
        self.assertEqual(got, [
            (0, b"k", b"v0", {"trace": b"\x00\xff", "n": b"1"}),
            (1, None, b"\x00binary\xff", None),
            (2, b"k", None, None),
        ])
        self.assertEqual(claim.records[0].timestamp, ts)
        self.assertEqual(self.c.commit(claim), 3)
        self.assertIsNone(self.c.claim(t, "g"), "everything was committed")

    def test_release_redelivers_and_extend_moves_expiry(self):
        t = self.topic()
        self.c.publish(t, [Record(b"a"), Record(b"b")])
        claim = self.c.claim(t, "g", lease=timedelta(seconds=5))
        before = claim.expires_at
        self.c.extend(claim, timedelta(minutes=5))
        self.assertGreater(claim.expires_at, before)
        self.c.release(claim)
        again = self.c.claim(t, "g")
        self.assertEqual([r.value for r in again.records], [b"a", b"b"])

    def test_errors_carry_the_pm_code(self):
        t = self.topic()
        with self.assertRaises(PgmsgError) as cm:
            self.c.publish(env.name("missing"), [Record(b"x")])
        self.assertEqual((cm.exception.code, cm.exception.name), ("PM001", "unknown_topic"))
        self.assertIn("missing", cm.exception.message)

        with self.assertRaises(PgmsgError) as cm:
            self.c.publish(t, [])
        self.assertEqual(cm.exception.code, "PM010")

        self.c.publish(t, [Record(b"x")])
        claim = self.c.claim(t, "g")
        self.c.commit(claim)
        with self.assertRaises(PgmsgError) as cm:
            self.c.commit(claim)
        self.assertEqual((cm.exception.code, cm.exception.name), ("PM009", "claim_not_held"))

    def test_publish_in_the_callers_transaction(self):
        t = self.topic()
        tx = psycopg.connect(env.URL)  # not autocommit: publish joins the transaction
        self.addCleanup(tx.close)
        c = pgmsg.Client(tx, env.SCHEMA)
        c.publish(t, [Record(b"rolled back")])
        tx.rollback()
        c.publish(t, [Record(b"committed")])
        tx.commit()
        claim = self.c.claim(t, "g")
        self.assertEqual([(r.offset, r.value) for r in claim.records], [(0, b"committed")])


class ConsumerTest(unittest.TestCase):
    def setUp(self):
        self.conn = env.connect()
        self.addCleanup(self.conn.close)
        self.c = pgmsg.Client(self.conn, env.SCHEMA)
        self.topic = env.name("t")
        env.sql(self.conn, "SELECT * FROM {s}.topic_create(%s, 1)", self.topic)

    def run_consumer(self, consumer, handler):
        th = threading.Thread(target=consumer.run, args=(handler,))
        th.start()
        return th

    def test_loop_commits_in_order_and_redelivers_after_an_error(self):
        self.c.publish(self.topic, [Record(str(i).encode()) for i in range(10)])
        seen = []
        failed = []
        done = threading.Event()
        with pgmsg.Consumer(env.URL, self.topic, "g", schema=env.SCHEMA, max_records=4,
                            retry_backoff=0.01, listen=False, poll_interval=0.05) as cons:
            def handle(claim):
                vals = [int(r.value) for r in claim.records]
                if 4 in vals and not failed:
                    failed.append(vals)
                    raise RuntimeError("first delivery of the batch with 4 fails")
                seen.extend(vals)
                if len(seen) == 10:
                    cons.stop()
                    done.set()

            th = self.run_consumer(cons, handle)
            self.assertTrue(done.wait(60))
            th.join()
        self.assertEqual(failed, [[4, 5, 6, 7]])
        self.assertEqual(seen, list(range(10)), "in order, the failed batch again and once")
        rows = env.sql(self.conn, "SELECT next_offset FROM {s}.group_list(%s, 'g')", self.topic)
        self.assertEqual(rows, [(10,)])

    def test_heartbeat_extends_a_slow_handlers_claim(self):
        self.c.publish(self.topic, [Record(b"slow")])
        expiries = []
        with pgmsg.Consumer(env.URL, self.topic, "g", schema=env.SCHEMA, lease=timedelta(seconds=3),
                            listen=False) as cons:
            def handle(claim):
                first = claim.expires_at
                # The heartbeat runs on its own: wait until the database
                # shows the claim's expiry moved past the first one.
                env.wait_until(lambda: env.sql(self.conn,
                    "SELECT claim_expires_at FROM {s}.group_list(%s, 'g') WHERE claim_expires_at > %s",
                    self.topic, first), "the heartbeat to extend the claim")
                expiries.append(first)

            self.assertTrue(cons.run_once(handle))
        self.assertEqual(len(expiries), 1)
        rows = env.sql(self.conn, "SELECT next_offset, claim_expires_at FROM {s}.group_list(%s, 'g')", self.topic)
        self.assertEqual(rows, [(1, None)], "committed after the extended lease")

    def test_listen_wakes_an_idle_consumer(self):
        got = threading.Event()
        # Polling once an hour: only the notification can wake it in time.
        tag = env.name("py-listen")
        with pgmsg.Consumer(env.tagged_url(tag), self.topic, "g", schema=env.SCHEMA, poll_interval=3600) as cons:
            def handle(claim):
                cons.stop()
                got.set()

            th = self.run_consumer(cons, handle)
            env.wait_until(lambda: env.listening(self.conn, tag), "the consumer to listen")
            self.c.publish(self.topic, [Record(b"wake")])
            self.assertTrue(got.wait(60), "the publish notification woke the consumer")
            th.join()


    def test_polling_when_the_listener_is_lost(self):
        tag = env.name("py-lost")
        got = threading.Event()
        with pgmsg.Consumer(env.tagged_url(tag), self.topic, "g", schema=env.SCHEMA, poll_interval=0.2) as cons:
            def handle(claim):
                cons.stop()
                got.set()

            th = self.run_consumer(cons, handle)
            env.wait_until(lambda: env.listening(self.conn, tag), "the consumer to listen")
            killed = env.sql(self.conn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                             " WHERE application_name = %s AND query LIKE 'LISTEN %%'", tag)
            self.assertEqual(killed, [(True,)])
            self.c.publish(self.topic, [Record(b"found by polling")])
            self.assertTrue(got.wait(60))
            th.join()

    def test_stop_ends_an_idle_wait(self):
        tag = env.name("py-stop")
        with pgmsg.Consumer(env.tagged_url(tag), self.topic, "g", schema=env.SCHEMA, poll_interval=3600) as cons:
            th = self.run_consumer(cons, lambda claim: None)
            env.wait_until(lambda: env.listening(self.conn, tag), "the consumer to listen")
            cons.stop()
            th.join(60)
            self.assertFalse(th.is_alive(), "stop() interrupted the hour-long wait")


class ListenerTest(unittest.TestCase):
    def test_a_notification_read_with_a_statements_answer_is_kept(self):
        # psycopg reads notifications that arrive with a statement's answer
        # (such as LISTEN's own) and drops them unless a handler takes them.
        conn = env.connect()
        self.addCleanup(conn.close)
        sql = pgmsg.Client(conn, env.SCHEMA).sql
        lis = pgmsg.Listener(env.URL, sql)
        self.addCleanup(lis.close)
        self.assertFalse(lis.wait("t", 0), "nothing notified yet (this wait opens the connection)")
        conn.execute("SELECT pg_notify(%s, 't')", (sql.channel,))
        # Wait until the notification is in the listener's socket, then run
        # a statement on that connection, as LISTEN is run.
        ready, _, _ = select.select([lis.conn.fileno()], [], [], 60)
        self.assertTrue(ready, "the notification arrived")
        lis.conn.execute("SELECT 1")
        self.assertTrue(lis.wait("t", 0), "the wake-up was kept")


class QueueTest(unittest.TestCase):
    def setUp(self):
        self.conn = env.connect()
        self.addCleanup(self.conn.close)
        self.c = pgmsg.Client(self.conn, env.SCHEMA)
        self.queue = env.name("q")

    def job(self, id):
        rows = env.sql(self.conn, "SELECT state, result, errors, kind, tags, metadata FROM {s}.job_get(%s)", id)
        return rows[0]

    def test_sequence(self):
        many = self.c.enqueue_many(self.queue, [JobSpec(b"1", sequence_key="acct-1"), JobSpec(b"2", sequence_key="acct-1")])
        self.assertEqual([m.state for m in many], ["available", "pending"], "the second waits behind the first")
        jobs = self.c.claim_jobs(self.queue, 10)
        self.assertEqual([j.id for j in jobs], [many[0].id])
        self.c.complete(jobs[0])
        jobs = self.c.claim_jobs(self.queue, 10)
        self.assertEqual([j.id for j in jobs], [many[1].id], "the completion let the next run")

    def test_batch(self):
        cb = env.name("cb")
        res = self.c.enqueue_batch(self.queue, [JobSpec(b"1"), JobSpec(b"2")],
                                   on_complete={"kind": "done", "queue": cb, "args": {"n": 7}},
                                   on_discard={"kind": "failed", "queue": cb})
        self.assertEqual(len(res.jobs), 2)
        b = self.c.get_batch(res.id)
        self.assertEqual((b.total, b.available, b.completed, b.finished_at), (2, 2, 0, None))
        jobs = self.c.claim_jobs(self.queue, 10)
        self.c.complete(jobs[0])
        self.assertIsNone(self.c.get_batch(res.id).complete_job_id, "one job is left")
        self.c.complete(jobs[1])
        b = self.c.get_batch(res.id)
        self.assertEqual(b.completed, 2)
        self.assertIsNotNone(b.finished_at)
        self.assertIsNone(b.discard_job_id)
        self.assertEqual(b.on_complete["args"], {"n": 7})
        state, _, _, kind, _, metadata = self.job(b.complete_job_id)
        self.assertEqual((state, kind), ("available", "done"))
        self.assertEqual(metadata["batch"], {"id": res.id, "callback": "complete", "total": 2, "completed": 2,
                                             "cancelled": 0, "dead": 0})

    def test_batch_refused(self):
        for spec in ({"queue": "x"}, {"kind": "k", "queue": "bad name"}, {"kind": "k", "other": 1}):
            with self.assertRaises(PgmsgError) as cm:
                self.c.enqueue_batch(self.queue, [JobSpec(b"1")], on_discard=spec)
            self.assertEqual(cm.exception.code, "PM120")
        with self.assertRaises(PgmsgError) as cm:
            self.c.enqueue_batch(self.queue, [])
        self.assertEqual(cm.exception.code, "PM010")
        with self.assertRaises(PgmsgError) as cm:
            self.c.get_batch(987654321)
        self.assertEqual(cm.exception.code, "PM121")

    def test_limit_key(self):
        env.sql(self.conn, "SELECT name FROM {s}.queue_create(%s, p_key_limit => 1)", self.queue)
        many = self.c.enqueue_many(self.queue, [JobSpec(b"1", limit_key="cust-1"), JobSpec(b"2", limit_key="cust-1"),
                                                JobSpec(b"3", limit_key="cust-2")])
        self.assertEqual([m.state for m in many], ["available", "pending", "available"], "one job of a key at a time")
        jobs = self.c.claim_jobs(self.queue, 10)
        self.assertEqual(sorted(j.id for j in jobs), [many[0].id, many[2].id])
        self.c.complete(jobs[0] if jobs[0].id == many[0].id else jobs[1])
        jobs = self.c.claim_jobs(self.queue, 10)
        self.assertEqual([j.id for j in jobs], [many[1].id], "the completion admitted the key's next")

    def test_tenant(self):
        many = self.c.enqueue_many(self.queue, [JobSpec(b"big", tenant="big") for _ in range(5)])
        small = self.c.enqueue(self.queue, b"small", tenant="small")
        jobs = self.c.claim_jobs(self.queue, 2)
        self.assertEqual([j.id for j in jobs], [many[0].id, small.id], "the later tenant is served in turn, not after the backlog")
        with self.assertRaises(PgmsgError) as cm:
            self.c.enqueue(self.queue, b"x", tenant="has space")
        self.assertEqual((cm.exception.code, cm.exception.name), ("PM118", "invalid_tenant"))

    def test_enqueue_claim_complete_fail(self):
        r = self.c.enqueue(self.queue, b'{"to":"ada"}', kind="welcome", priority=5, unique_key="u1",
                           tags=["eu"], metadata={"by": "ann"})
        self.assertFalse(r.duplicate)
        dup = self.c.enqueue(self.queue, b"other", unique_key="u1")
        self.assertEqual((dup.id, dup.duplicate), (r.id, True))
        many = self.c.enqueue_many(self.queue, [JobSpec(b"a"), JobSpec(b"b", delay=timedelta(hours=1))])
        self.assertEqual([m.state for m in many], ["available", "scheduled"])

        jobs = self.c.claim_jobs(self.queue, 10, worker="py")
        self.assertEqual([j.id for j in jobs], [r.id, many[0].id], "priority first; the delayed job waits")
        self.assertEqual((jobs[0].kind, jobs[0].payload, jobs[0].attempt), ("welcome", b'{"to":"ada"}', 1))
        self.c.extend_job(jobs[0], timedelta(minutes=1))
        self.assertEqual(sorted(self.c.extend_jobs(jobs)), sorted(j.id for j in jobs))
        self.c.complete(jobs[0], {"sent": True})
        self.assertEqual(self.c.fail(jobs[1], "smtp down", retry_in=timedelta(hours=1)), "retrying")

        state, result, errors, kind, tags, metadata = self.job(r.id)
        self.assertEqual((state, result, kind, tags, metadata), ("completed", {"sent": True}, "welcome", ["eu"], {"by": "ann"}))
        state, _, errors, _, _, _ = self.job(many[0].id)
        self.assertEqual(state, "retrying")
        self.assertEqual(errors[-1]["error"], "smtp down")

        with self.assertRaises(PgmsgError) as cm:
            self.c.complete(jobs[0])
        self.assertEqual((cm.exception.code, cm.exception.name), ("PM106", "job_not_held"))
        with self.assertRaises(PgmsgError) as cm:
            self.c.enqueue(self.queue, b"x", priority=70000)
        self.assertEqual(cm.exception.code, "PM004")

    def test_worker_completes_and_fails(self):
        ok = self.c.enqueue(self.queue, b"1", kind="ok")
        bad = self.c.enqueue(self.queue, b"2", kind="boom", max_attempts=1)
        with pgmsg.Worker(env.URL, self.queue, schema=env.SCHEMA, batch=2, listen=False) as w:
            n = w.run_once(lambda job: (_ for _ in ()).throw(ValueError("no")) if job.kind == "boom"
                           else {"payload": job.payload.decode()})
        self.assertEqual(n, 2)
        self.assertEqual(self.job(ok.id)[:2], ("completed", {"payload": "1"}))
        state, _, errors, _, _, _ = self.job(bad.id)
        self.assertEqual(state, "dead", "its only attempt failed")
        self.assertEqual(errors[-1]["error"], "ValueError: no")

    def test_worker_keeps_logs_and_steps(self):
        ok = self.c.enqueue(self.queue, b"1", kind="ok")
        bad = self.c.enqueue(self.queue, b"2", kind="boom", max_attempts=1)
        quiet = self.c.enqueue(self.queue, b"3", kind="quiet")

        def handle(job):
            if job.kind == "quiet":
                return None
            job.log("handling %s", job.payload.decode())
            if job.kind == "boom":
                raise ValueError("no")
            self.c.save_step(job, "charge", {"id": 7})
            return "done"

        with pgmsg.Worker(env.URL, self.queue, schema=env.SCHEMA, batch=3, listen=False) as w:
            self.assertEqual(w.run_once(handle), 3)
        logs = self.c.job_logs(ok.id)
        self.assertEqual([(l.attempt, l.outcome, l.log) for l in logs], [(1, "completed", "handling 1\n")])
        steps = self.c.job_steps(ok.id)
        self.assertEqual([(s.name, s.attempt, s.output) for s in steps], [("charge", 1, {"id": 7})])
        self.assertEqual([(l.outcome, l.log) for l in self.c.job_logs(bad.id)], [("dead", "handling 2\n")])
        self.assertEqual(self.c.job_logs(quiet.id), [])
        with self.assertRaises(PgmsgError) as cm:
            self.c.job_logs(10 ** 12)
        self.assertEqual(cm.exception.code, "PM107")

        # A step of a job not held (completed above) is refused; bad names
        # and large outputs have their own codes.
        with self.assertRaises(PgmsgError) as cm:
            self.c.save_step(_held(self.c, self.queue), "bad name")
        self.assertEqual(cm.exception.code, "PM122")
        j = _held(self.c, self.queue)
        with self.assertRaises(PgmsgError) as cm:
            self.c.save_step(j, "big", "x" * 70000)
        self.assertEqual((cm.exception.code, cm.exception.name), ("PM123", "step_too_large"))
        j.lease_token -= 1
        with self.assertRaises(PgmsgError) as cm:
            self.c.save_step(j, "late", 1)
        self.assertEqual(cm.exception.code, "PM106")

        # Cut at the bound with a last line that says so.
        j.log_lines = ["é" * 100] * 10
        text = j.log_text(300)
        self.assertLessEqual(len(text.encode()), 300)
        self.assertTrue(text.endswith("[pgmsg: log truncated at 300 bytes]\n"))

    def test_step_runs_once_across_attempts(self):
        done = self.c.enqueue(self.queue, b"s")
        ran = []

        def attempt(crash):
            jobs = self.c.claim_jobs(self.queue)
            self.assertEqual([j.id for j in jobs], [done.id])
            job = jobs[0]
            charged = self.c.step(job, "charge", lambda: ran.append("charge") or {"id": 7})
            # Again in the same attempt: the stored output, fn not called.
            self.assertEqual(self.c.step(job, "charge", lambda: ran.append("charge again")), {"id": 7})
            self.assertIsNone(self.c.step(job, "noop", lambda: ran.append("noop")))
            if crash:
                self.c.fail(job, "crash after charge", retry_in=timedelta(0))
                return charged, None
            shipped = self.c.step(job, "ship/1", lambda: ran.append("ship") or charged["id"] + 1)
            self.c.complete(job)
            return charged, shipped

        self.assertEqual(attempt(True), ({"id": 7}, None))
        self.assertEqual(ran, ["charge", "noop"])
        # The retry gets the first attempt's outputs and runs only the rest.
        self.assertEqual(attempt(False), ({"id": 7}, 8))
        self.assertEqual(ran, ["charge", "noop", "ship"])
        steps = self.c.job_steps(done.id)
        self.assertEqual([(s.name, s.attempt, s.output) for s in steps],
                         [("charge", 1, {"id": 7}), ("noop", 1, None), ("ship/1", 2, 8)])
        self.assertEqual(self.job(done.id)[0], "completed")

        # A bad name is refused before fn runs; a lost lease after it, and
        # the step is not taken as done.
        j = _held(self.c, self.queue)
        with self.assertRaises(PgmsgError) as cm:
            self.c.step(j, "bad name", lambda: ran.append("bad"))
        self.assertEqual(cm.exception.code, "PM122")
        self.assertEqual(ran, ["charge", "noop", "ship"])
        j.lease_token -= 1
        with self.assertRaises(PgmsgError) as cm:
            self.c.step(j, "late", lambda: 1)
        self.assertEqual(cm.exception.code, "PM106")
        self.assertNotIn("late", j.steps_done)

    def test_heartbeat_extends_a_slow_jobs_lease(self):
        j = self.c.enqueue(self.queue, b"slow")
        with pgmsg.Worker(env.URL, self.queue, schema=env.SCHEMA, lease=timedelta(seconds=3), listen=False) as w:
            def handle(job):
                env.wait_until(lambda: env.sql(self.conn,
                    "SELECT 1 FROM {s}.job_get(%s) WHERE lease_expires_at > %s", job.id, job.lease_expires_at),
                    "the heartbeat to extend the lease")
                return "done"

            self.assertEqual(w.run_once(handle), 1)
        self.assertEqual(self.job(j.id)[:2], ("completed", "done"))

    def test_listen_wakes_an_idle_worker(self):
        got = []
        tag = env.name("py-listen")
        with pgmsg.Worker(env.tagged_url(tag), self.queue, schema=env.SCHEMA, poll_interval=3600) as w:
            def handle(job):
                got.append(job.payload)
                w.stop()

            th = threading.Thread(target=w.run, args=(handle,))
            th.start()
            env.wait_until(lambda: env.listening(self.conn, tag), "the worker to listen")
            self.c.enqueue(self.queue, b"wake")
            th.join(60)
            self.assertFalse(th.is_alive(), "the enqueue notification woke the worker")
        self.assertEqual(got, [b"wake"])


if __name__ == "__main__":
    unittest.main()
