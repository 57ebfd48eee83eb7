"""The Python side of the interop tests in clients/clients_test.go, which
runs it as a subprocess and checks what it prints (JSON, one object a line).

    python3 -m tests.interop consume URL SCHEMA TOPIC GROUP LIMIT
        consumes as GROUP, one committed claim after another, until it has
        read LIMIT records or nothing is left; prints each record.
    python3 -m tests.interop wait URL SCHEMA TOPIC GROUP LIMIT
        as consume, but LISTENing and polling once an hour: only a
        notification wakes it (the caller publishes once it listens).
    python3 -m tests.interop enqueue URL SCHEMA QUEUE COUNT
        enqueues COUNT jobs of kind "py" with payload {"n": i}; prints their ids.
"""

import base64
import json
import sys

import psycopg

import pgmsg


def consume(url, schema, topic, group, limit):
    out = []

    def handle(claim):
        for r in claim.records:
            out.append({
                "partition": r.partition,
                "offset": r.offset,
                "key": r.key.decode(),
                "value": r.value.decode(),
                "headers": {k: base64.b64encode(v).decode() for k, v in (r.headers or {}).items()},
            })

    with pgmsg.Consumer(url, topic, group, schema=schema, max_records=4, listen=False) as c:
        while len(out) < limit and c.run_once(handle):
            pass
    for o in out:
        print(json.dumps(o))


def wait(url, schema, topic, group, limit):
    out = []
    with pgmsg.Consumer(url, topic, group, schema=schema, poll_interval=3600) as c:
        def handle(claim):
            out.extend(r.value.decode() for r in claim.records)
            if len(out) >= limit:
                c.stop()

        c.run(handle)
    for v in out:
        print(json.dumps({"value": v}))


def enqueue(url, schema, queue, count):
    with psycopg.connect(url, autocommit=True) as conn:
        c = pgmsg.Client(conn, schema)
        res = c.enqueue_many(queue, [pgmsg.JobSpec(json.dumps({"n": i}).encode(), kind="py") for i in range(count)])
    for r in res:
        print(json.dumps({"id": r.id}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "consume":
        consume(args[0], args[1], args[2], args[3], int(args[4]))
    elif cmd == "wait":
        wait(args[0], args[1], args[2], args[3], int(args[4]))
    elif cmd == "enqueue":
        enqueue(args[0], args[1], args[2], int(args[3]))
    else:
        sys.exit("unknown command " + cmd)
