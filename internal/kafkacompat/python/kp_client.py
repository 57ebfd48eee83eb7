#!/usr/bin/python3
"""kafka-python against a Kafka listener, driven by internal/kafkacompat's
Go tests. Prints JSON lines on stdout (see ck_client.py).

  produce --count N     keys, headers, timestamps; waits for every ack
  group --expect N      one consumer of a group reads N records and commits
"""
import argparse
import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def dec(b):
    return None if b is None else b.decode()


def headers_json(hs):
    return sorted([{"key": k, "value": dec(v)} for k, v in (hs or [])], key=lambda h: h["key"])


def produce(a):
    p = KafkaProducer(bootstrap_servers=a.bootstrap.split(","), acks="all", linger_ms=5,
                      compression_type="gzip", request_timeout_ms=30000)
    futures = []
    for i in range(a.count):
        key = "kp-key-%d" % (i % 7)
        value = None if i == 3 else "kp-value-%d" % i
        headers = [("n", str(i).encode()), ("client", b"kafka-python")]
        f = p.send(a.topic, key=key.encode(), value=None if value is None else value.encode(),
                   headers=headers, timestamp_ms=a.base_ts + i)
        futures.append((f, key, value, headers))
    p.flush(60)
    for f, key, value, headers in futures:
        md = f.get(timeout=60)
        out({"event": "delivered", "record": {"topic": md.topic, "partition": md.partition, "offset": md.offset,
                                              "key": key, "value": value, "headers": headers_json(headers),
                                              "timestamp": md.timestamp}})
    p.close(30)


def group(a):
    c = KafkaConsumer(a.topic, bootstrap_servers=a.bootstrap.split(","), group_id=a.group,
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=1000)
    seen = set()
    deadline = time.time() + a.timeout
    try:
        while len(seen) < a.expect:
            if time.time() > deadline:
                sys.exit("group: timed out with %d of %d records" % (len(seen), a.expect))
            batch = c.poll(timeout_ms=500)
            for _, msgs in batch.items():
                for m in msgs:
                    if (m.partition, m.offset) in seen:
                        continue
                    seen.add((m.partition, m.offset))
                    out({"event": "record", "record": {"topic": m.topic, "partition": m.partition, "offset": m.offset,
                                                       "key": dec(m.key), "value": dec(m.value),
                                                       "headers": headers_json(m.headers), "timestamp": m.timestamp}})
            if batch:
                c.commit()
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["produce", "group"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", default="kp-group")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--expect", type=int, default=200)
    ap.add_argument("--base-ts", type=int, default=1764979200000)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    produce(a) if a.mode == "produce" else group(a)


if __name__ == "__main__":
    main()
