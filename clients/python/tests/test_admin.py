import unittest
from datetime import timedelta

import pgmsg
from pgmsg import PgmsgError, Record
from pgmsg.aio import AsyncClient

from . import env


class AdminTest(unittest.TestCase):
    """Topics, groups and queues administered through the SQL API."""

    def setUp(self):
        self.conn = env.connect()
        self.addCleanup(self.conn.close)
        self.c = pgmsg.Client(self.conn, env.SCHEMA)

    def test_topic_create_list_describe_delete(self):
        t = env.name("t")
        made = self.c.create_topic(t, partitions=3, config={"retention_ms": 3600000})
        self.assertEqual((made.name, made.partitions, made.config["retention_ms"]), (t, 3, 3600000))
        with self.assertRaises(PgmsgError) as cm:
            self.c.create_topic(t)
        self.assertEqual(cm.exception.name, "topic_exists")
        again = self.c.create_topic(t, partitions=1, exist_ok=True)
        self.assertEqual(again.partitions, 3, "exist_ok returns the topic as it is")
        self.assertIn(t, [x.name for x in self.c.list_topics()])

        self.c.publish(t, [Record(b"a", key=b"k"), Record(b"b", key=b"k")])
        parts = self.c.describe_topic(t)
        self.assertEqual([p.partition for p in parts], [0, 1, 2])
        self.assertEqual(sum(p.records for p in parts), 2)

        with self.assertRaises(PgmsgError) as cm:
            self.c.delete_topic(t)
        self.assertEqual((cm.exception.code, cm.exception.name), ("PM017", "topic_not_empty"))
        self.assertIn(t, [x.name for x in self.c.list_topics()], "a refused delete deletes nothing")
        self.c.delete_topic(t, force=True)
        self.assertNotIn(t, [x.name for x in self.c.list_topics()])
        with self.assertRaises(PgmsgError) as cm:
            self.c.describe_topic(t)
        self.assertEqual(cm.exception.name, "unknown_topic")

        empty = env.name("t")
        self.c.create_topic(empty)
        self.c.delete_topic(empty)  # nothing in it: no force needed
        self.assertNotIn(empty, [x.name for x in self.c.list_topics()])

    def test_group_list_reset_delete(self):
        t = env.name("t")
        self.c.create_topic(t)
        self.c.publish(t, [Record(b"a"), Record(b"b"), Record(b"c")])
        self.c.commit(self.c.claim(t, "billing", max_records=2))
        rows = self.c.list_groups(t)
        self.assertEqual([(g.group, g.partition, g.next_offset, g.end_offset, g.lag) for g in rows],
                         [("billing", 0, 2, 3, 1)])
        self.assertEqual(self.c.list_groups(group="billing", topic=t)[0].lag, 1)
        reset = self.c.reset_group(t, "billing", "earliest")
        self.assertEqual([(g.topic, g.group, g.partition, g.next_offset) for g in reset], [(t, "billing", 0, 0)])
        self.assertEqual(self.c.reset_group(t, "billing", "latest", partition=0)[0].next_offset, 3)
        self.assertEqual(self.c.reset_group(t, "billing", "1")[0].next_offset, 1)
        # Times: RFC 3339 or a duration ago; PostgreSQL's other literals are refused.
        self.assertEqual(self.c.reset_group(t, "billing", "1h")[0].next_offset, 0, "every record is newer than 1h")
        self.assertEqual(self.c.reset_group(t, "billing", "2999-01-01T00:00:00Z")[0].next_offset, 3)
        for bad in ("yesterday", "epoch", "2026-01-01", "1d"):
            with self.assertRaises(PgmsgError) as cm:
                self.c.reset_group(t, "billing", bad)
            self.assertEqual(cm.exception.name, "invalid_offset", bad)
        self.assertEqual(self.c.list_groups(t)[0].next_offset, 3, "a refused reset moves nothing")
        with self.assertRaises(PgmsgError) as cm:
            self.c.reset_group(t, "nobody", "earliest")
        self.assertEqual(cm.exception.name, "unknown_group")
        self.assertTrue(self.c.delete_group(t, "billing"))
        self.assertFalse(self.c.delete_group(t, "billing"))
        self.assertEqual(self.c.list_groups(t), [])

    def test_queue_create_list_describe_delete(self):
        q = env.name("q")
        made = self.c.create_queue(q, max_attempts=3, lease=timedelta(minutes=2), rate_limit=50, max_running=10)
        self.assertEqual((made.name, made.max_attempts, made.lease, made.rate_limit, made.max_running, made.paused),
                         (q, 3, timedelta(minutes=2), 50, 10, False))
        self.assertIsNone(made.max_depth)
        with self.assertRaises(PgmsgError) as cm:
            self.c.create_queue(q)
        self.assertEqual(cm.exception.name, "queue_exists")
        self.assertEqual(self.c.create_queue(q, exist_ok=True, max_attempts=9).max_attempts, 3)
        with self.assertRaises(TypeError):
            self.c.create_queue(env.name("q"), max_attempt=3)  # a typo is not ignored
        self.assertIn(q, [x.name for x in self.c.list_queues()])

        stats = self.c.describe_queue(q)
        self.assertEqual((stats.queue, stats.available, stats.oldest_available_seconds), (q, 0, None))
        self.c.enqueue(q, b"1")
        stats = self.c.describe_queue(q)
        self.assertEqual(stats.available, 1)
        self.assertIsNotNone(stats.oldest_available_seconds)

        with self.assertRaises(PgmsgError) as cm:
            self.c.delete_queue(q)
        self.assertEqual((cm.exception.code, cm.exception.name), ("PM108", "queue_not_empty"))
        self.c.delete_queue(q, force=True)
        self.assertNotIn(q, [x.name for x in self.c.list_queues()])
        with self.assertRaises(PgmsgError) as cm:
            self.c.describe_queue(q)
        self.assertEqual(cm.exception.name, "unknown_queue")


class AsyncAdminTest(unittest.IsolatedAsyncioTestCase):
    async def test_the_same_calls_as_coroutines(self):
        import psycopg

        conn = await psycopg.AsyncConnection.connect(env.URL, autocommit=True)
        try:
            c = AsyncClient(conn, env.SCHEMA)
            t, q = env.name("t"), env.name("q")
            self.assertEqual((await c.create_topic(t, partitions=2)).partitions, 2)
            self.assertEqual((await c.create_topic(t, exist_ok=True)).partitions, 2)
            self.assertIn(t, [x.name for x in await c.list_topics()])
            await c.publish(t, [Record(b"x")], partition=1)
            self.assertEqual([p.records for p in await c.describe_topic(t)], [0, 1])
            await c.commit(await c.claim(t, "g"))
            self.assertEqual([(g.partition, g.lag) for g in await c.list_groups(t, "g")], [(0, 0), (1, 0)])
            self.assertEqual([g.next_offset for g in await c.reset_group(t, "g", "earliest", partition=1)], [0])
            self.assertTrue(await c.delete_group(t, "g"))
            await c.delete_topic(t, force=True)
            self.assertNotIn(t, [x.name for x in await c.list_topics()])

            self.assertEqual((await c.create_queue(q, max_attempts=2)).max_attempts, 2)
            self.assertIn(q, [x.name for x in await c.list_queues()])
            self.assertEqual((await c.describe_queue(q)).available, 0)
            await c.delete_queue(q)
            with self.assertRaises(PgmsgError) as cm:
                await c.delete_queue(q)
            self.assertEqual(cm.exception.name, "unknown_queue")
        finally:
            await conn.close()


if __name__ == "__main__":
    unittest.main()
