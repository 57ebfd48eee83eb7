#!/usr/bin/python3
"""confluent-kafka-python (librdkafka) against a Kafka listener, driven by
internal/kafkacompat's Go tests. Each mode prints JSON lines on stdout: the
records it wrote or read, and events; the Go test compares them with what
pgmsg stores. Exit status 0 only when the mode did all it was asked.

  produce --count N          idempotent producer: keys, headers, timestamps
  group --expect N           3 consumers of one group joining one after
                             another while the group consumes; commits
  seekts --ts MS --partitions P   offsets for a timestamp, then a read there
"""
import argparse
import json
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def dec(b):
    return None if b is None else b.decode()


def rec(m):
    _, ts = m.timestamp()
    return {"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
            "key": dec(m.key()), "value": dec(m.value()),
            "headers": sorted([{"key": k, "value": dec(v)} for k, v in (m.headers() or [])], key=lambda h: h["key"]),
            "timestamp": ts}


def produce(a):
    p = Producer({"bootstrap.servers": a.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "compression.type": "zstd", "partitioner": "murmur2_random"})
    failed = []

    def report(err, m, headers):
        if err is not None:
            failed.append(str(err))
            return
        r = rec(m)
        # A delivery report carries no headers: those sent.
        r["headers"] = sorted([{"key": k, "value": v} for k, v in headers], key=lambda h: h["key"])
        out({"event": "delivered", "record": r})

    for i in range(a.count):
        value = None if i == 7 else "ck-value-%d" % i
        headers = [("n", str(i)), ("client", "confluent-kafka")]
        p.produce(a.topic, key="ck-key-%d" % (i % 13), value=value, headers=headers,
                  timestamp=a.base_ts + i, on_delivery=lambda err, m, h=headers: report(err, m, h))
        p.poll(0)
    left = p.flush(60)
    if left or failed:
        sys.exit("produce: %d records not delivered, errors: %s" % (left, failed[:5]))


class Group:
    """Three members of one group; the second joins once a quarter of the
    records is read, the third at half. When a member joins, every member
    holds (reads nothing new: a record polled meanwhile is sought back)
    until all of them, the new one included, got their assignment of the
    rebalance, so the group's work demonstrably moves while it consumes."""

    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.seen = {}          # (partition, offset) -> member
        self.dups = 0
        self.members = 0
        self.holding = False
        self.need = set()       # members that must see a new assignment
        self.done = threading.Event()
        self.errors = []
        self.threads = []

    def start_member(self):
        with self.lock:
            name = "member-%d" % self.members
            self.members += 1
            if self.members > 1:
                self.holding = True
                self.need = set("member-%d" % i for i in range(self.members))
                out({"event": "join", "member": name, "consumed": len(self.seen)})
        t = threading.Thread(target=self.run, args=(name,), daemon=True)
        t.start()
        self.threads.append(t)

    def run(self, name):
        try:
            self.consume(name)
        except Exception as e:  # reported by the main thread
            self.errors.append("%s: %r" % (name, e))
            self.done.set()

    def consume(self, name):
        a = self.a
        c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                      "client.id": name})

        def on_assign(consumer, parts):
            with self.lock:
                out({"event": "assign", "member": name, "partitions": sorted(p.partition for p in parts)})
                self.need.discard(name)
                if self.holding and not self.need:
                    self.holding = False
                    out({"event": "release", "consumed": len(self.seen)})

        def on_revoke(consumer, parts):
            out({"event": "revoke", "member": name, "partitions": sorted(p.partition for p in parts)})

        c.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.done.is_set():
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                with self.lock:
                    hold = self.holding
                if hold:
                    try:
                        c.seek(TopicPartition(m.topic(), m.partition(), m.offset()))
                    except KafkaException:
                        pass  # no longer assigned: the next owner reads it
                    continue
                r = rec(m)
                key = (r["partition"], r["offset"])
                while True:
                    try:
                        c.commit(message=m, asynchronous=False)
                        break
                    except KafkaException as e:
                        if e.args[0].retriable() or e.args[0].code() in (KafkaError.REBALANCE_IN_PROGRESS,):
                            time.sleep(0.05)
                            continue
                        if e.args[0].code() in (KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                                                KafkaError._NO_OFFSET):
                            break  # the partition moved: its next owner reads from the last commit
                        raise
                with self.lock:
                    if key in self.seen:
                        self.dups += 1
                    else:
                        self.seen[key] = name
                        r["member"] = name
                        out({"event": "record", "record": r})
                    n = len(self.seen)
                if n >= a.expect:
                    self.done.set()
                time.sleep(a.delay)
        finally:
            c.close()

    def main(self):
        a = self.a
        self.start_member()
        joined = 1
        deadline = time.time() + a.timeout
        while not self.done.wait(0.05):
            if time.time() > deadline:
                self.errors.append("timed out with %d of %d records" % (len(self.seen), a.expect))
                self.done.set()
                break
            with self.lock:
                n, hold = len(self.seen), self.holding
            if not hold and joined == 1 and n >= a.expect // 4:
                self.start_member()
                joined = 2
            elif not hold and joined == 2 and n >= a.expect // 2:
                self.start_member()
                joined = 3
        for t in self.threads:
            t.join(30)
        out({"event": "done", "records": len(self.seen), "duplicates": self.dups, "members": joined})
        if self.errors:
            sys.exit("group: " + "; ".join(self.errors))
        if joined < 3:
            sys.exit("group: only %d members joined before the end" % joined)


def seekts(a):
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "ck-seekts", "enable.auto.commit": False})
    try:
        parts = c.offsets_for_times([TopicPartition(a.topic, p, a.ts) for p in range(a.partitions)], timeout=30)
        for tp in parts:
            if tp.error:
                sys.exit("offsets_for_times %s/%d: %s" % (tp.topic, tp.partition, tp.error))
            out({"event": "offset", "partition": tp.partition, "offset": tp.offset})
        want = {tp.partition for tp in parts if tp.offset >= 0}
        c.assign([tp for tp in parts if tp.offset >= 0])
        deadline = time.time() + 30
        while want and time.time() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            if m.partition() in want:
                want.discard(m.partition())
                out({"event": "first", "record": rec(m)})
        if want:
            sys.exit("seekts: nothing read from partitions %s" % sorted(want))
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["produce", "group", "seekts"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", default="ck-group")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--expect", type=int, default=300)
    ap.add_argument("--base-ts", type=int, default=1764979200000)
    ap.add_argument("--ts", type=int, default=0)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.002)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    if a.mode == "produce":
        produce(a)
    elif a.mode == "group":
        Group(a).main()
    else:
        seekts(a)


if __name__ == "__main__":
    main()
