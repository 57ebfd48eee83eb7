"""The synchronous client: Client for single calls, Consumer and Worker for
the loops. Each call is one SQL function of the pgmsg schema
(docs/sql-api.md)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import psycopg

from ._common import (
    Batch,
    BatchResult,
    Claim,
    EnqueueResult,
    GroupPartition,
    Job,
    JobLog,
    JobSpec,
    JobStep,
    PublishResult,
    Queue,
    QueueStats,
    Record,
    Statements,
    Topic,
    TopicPartition,
    check_step_name,
    heartbeat_interval,
    job_lease,
)
from .errors import PgmsgError, translate

log = logging.getLogger("pgmsg")


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as e:
        pe = translate(e)
        if pe is None:
            raise
        raise pe from e


class Client:
    """Calls the SQL API on a psycopg connection the caller owns.

    Each method runs in the connection's current transaction: with
    autocommit each call is its own transaction; without it, publish and
    enqueue commit with the caller's other writes (an outbox), and a claim
    and its commit can share the transaction of the handler's writes.
    """

    def __init__(self, conn: psycopg.Connection, schema: str = "pgmsg"):
        self.conn = conn
        self.sql = Statements(schema)

    def _rows(self, query: Any, args: dict) -> List[tuple]:
        with _errors(), self.conn.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchall()

    # The log -----------------------------------------------------------------

    def publish(self, topic: str, records: Sequence[Record], partition: Optional[int] = None) -> List[PublishResult]:
        """Appends records (values, keys, headers, timestamps) in one call of
        publish(); returns one row per partition written. A record's
        partition is `partition`, else its key's hash, else one random
        partition for the call's unkeyed records."""
        rows = self._rows(self.sql.publish, Statements.publish_args(topic, records, partition))
        return [PublishResult(*r) for r in rows]

    def claim(
        self,
        topic: str,
        group: str,
        max_records: int = 100,
        lease: timedelta = timedelta(seconds=30),
        partition: Optional[int] = None,
        start: str = "earliest",
    ) -> Optional[Claim]:
        """Leases the next records of one partition to the caller (None:
        nothing to read). The group is created at `start` on first use."""
        rows = self._rows(
            self.sql.claim,
            {"topic": topic, "group": group, "max_records": max_records, "lease": lease,
             "partition": partition, "start": start},
        )
        return Statements.to_claim(topic, group, rows)

    def commit(self, claim: Claim) -> int:
        """Moves the group's cursor past the claim; returns the new cursor.
        PM008/PM009 when the claim was lost (its records come again)."""
        return self._rows(self.sql.commit, Statements.claim_key(claim))[0][0]

    def release(self, claim: Claim) -> None:
        """Ends the claim without moving the cursor: redelivered at once."""
        self._rows(self.sql.release, Statements.claim_key(claim))

    def extend(self, claim: Claim, lease: timedelta = timedelta(seconds=30)) -> None:
        """Keeps the claim until now + lease (a heartbeat for slow handlers)."""
        args = Statements.claim_key(claim)
        args["lease"] = lease
        claim.expires_at = self._rows(self.sql.extend, args)[0][0]

    # The queue ---------------------------------------------------------------

    def enqueue(self, queue: str, payload: bytes, **opts: Any) -> EnqueueResult:
        """One job; opts are JobSpec's fields (kind, priority, run_at, delay,
        max_attempts, unique_key, timeout, tags, metadata, sequence_key,
        sequence_continue, limit_key)."""
        return self.enqueue_many(queue, [JobSpec(payload=payload, **opts)])[0]

    def enqueue_many(self, queue: str, jobs: Sequence[JobSpec]) -> List[EnqueueResult]:
        """A batch in one call of enqueue_many(); one result per job, in order."""
        rows = self._rows(self.sql.enqueue_many, Statements.enqueue_args(queue, jobs))
        return [EnqueueResult(*r) for r in rows]

    def enqueue_batch(
        self,
        queue: str,
        jobs: Sequence[JobSpec],
        on_complete: Optional[Dict[str, Any]] = None,
        on_discard: Optional[Dict[str, Any]] = None,
        on_finished: Optional[Dict[str, Any]] = None,
    ) -> BatchResult:
        """The jobs as one batch, all or nothing (job_enqueue_batch()): once
        every job is final, on_complete (all completed) or on_discard (one
        dead, cancelled or deleted), then on_finished, are enqueued exactly
        once. A callback is a dict {"kind", "args", "queue", "priority",
        "metadata"}; the callback job's metadata gets "batch": {"id",
        "callback", "total", "completed", "cancelled", "dead"}. PM010 empty,
        PM120 a bad callback."""
        rows = self._rows(
            self.sql.job_enqueue_batch, Statements.enqueue_batch_args(queue, jobs, on_complete, on_discard, on_finished)
        )
        return Statements.to_batch_result(rows)

    def get_batch(self, batch_id: int) -> Batch:
        """The batch's counts by state and callbacks (batch_get()); PM121 unknown."""
        return Batch(*(self._rows(self.sql.batch_get, {"id": batch_id}))[0])

    def ensure_queue(self, queue: str) -> None:
        """Creates the queue with default settings unless it exists."""
        self._rows(self.sql.queue_ensure, {"queue": queue})

    def claim_jobs(
        self, queue: str, limit: int = 1, lease: Optional[timedelta] = None, worker: Optional[str] = None
    ) -> List[Job]:
        """Leases up to `limit` claimable jobs (lease None: the queue's)."""
        rows = self._rows(self.sql.job_claim, {"queue": queue, "limit": limit, "lease": lease, "worker": worker})
        return [Statements.to_job(r) for r in rows]

    def complete(self, job: Job, result: Any = None, log: Optional[str] = None) -> None:
        """Archives the job with an optional JSON result and what the
        attempt logged (log, e.g. job.log_text()). PM106 if the lease was
        lost (the job ran again elsewhere or was cancelled)."""
        res = None if result is None else json.dumps(result)
        self._rows(self.sql.job_complete, {"id": job.id, "token": job.lease_token, "result": res, "log": log})

    def fail(
        self, job: Job, error: str, retry_in: Optional[timedelta] = None, dead: bool = False, log: Optional[str] = None
    ) -> str:
        """Records the error (and the attempt's log) and schedules a retry
        (or dead); returns the state."""
        rows = self._rows(
            self.sql.job_fail,
            {"id": job.id, "token": job.lease_token, "error": error, "retry_in": retry_in, "dead": dead, "log": log},
        )
        return rows[0][0]

    def job_logs(self, job_id: int) -> List[JobLog]:
        """What the job's handlers logged, one entry per attempt that logged
        something, oldest first. PM107 for an unknown job."""
        return [JobLog(*r) for r in self._rows(self.sql.job_logs, {"id": job_id})]

    def job_steps(self, job_id: int) -> List[JobStep]:
        """The step checkpoints the job recorded, in the order they completed."""
        return [JobStep(*r) for r in self._rows(self.sql.job_steps, {"id": job_id})]

    def save_step(self, job: Job, name: str, output: Any = None) -> None:
        """Records step `name` of the held job as completed with `output`
        (JSON), at once, under its lease: PM106 if the lease was lost, PM122
        for a bad name, PM123 for an output over 64 KiB."""
        out = None if output is None else json.dumps(output)
        self._rows(self.sql.job_step_save, {"id": job.id, "token": job.lease_token, "name": name, "output": out})

    def step(self, job: Job, name: str, fn: Callable[[], Any]) -> Any:
        """Runs fn() once per job, across attempts (the Go API's pgmsg.Step):
        when step `name` of the held job completed in an earlier attempt
        (or earlier in this one) it returns the stored output without
        calling fn; otherwise it calls fn and records its result (JSON) at
        once with save_step, under the job's lease, so that an attempt that
        fails later resumes after it. The job's steps are read once per
        attempt (job_steps). A bad name is PM122 before fn runs; a lost
        lease PM106 and an output over 64 KiB PM123, after fn ran (its
        result is then not recorded). A step is at least once: make fn's
        side effects idempotent."""
        check_step_name(name)
        if job.steps_done is None:
            job.steps_done = {s.name: s.output for s in self.job_steps(job.id)}
        if name in job.steps_done:
            return job.steps_done[name]
        out = fn()
        self.save_step(job, name, out)
        job.steps_done[name] = out
        return out

    def extend_job(self, job: Job, lease: Optional[timedelta] = None) -> None:
        """Heartbeat: the job's lease ends `lease` (None: the queue's) from now."""
        job.lease_expires_at = self._rows(
            self.sql.job_extend, {"id": job.id, "token": job.lease_token, "lease": lease}
        )[0][0]

    def extend_jobs(self, jobs: Sequence[Job], lease: Optional[timedelta] = None) -> List[int]:
        """Extends every held job of `jobs`; returns the ids still held."""
        if not jobs:
            return []
        rows = self._rows(
            self.sql.job_extend_many,
            {"ids": [j.id for j in jobs], "tokens": [j.lease_token for j in jobs], "lease": lease},
        )
        return [r[0] for r in rows]

    def snooze(self, job: Job, delay: timedelta = timedelta(0), log: Optional[str] = None) -> None:
        """Puts the job back without counting the attempt (0: a release)."""
        self._rows(self.sql.job_snooze, {"id": job.id, "token": job.lease_token, "delay": delay, "log": log})

    # Administration ----------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int = 1, config: Optional[Dict[str, Any]] = None, exist_ok: bool = False
    ) -> Topic:
        """Creates a topic (topic_create). config holds settings such as
        retention_ms or cleanup_policy (docs/sql-api.md). PM002
        topic_exists if it exists, unless exist_ok: then the existing
        topic is returned as it is (its partitions and config unchanged)."""
        try:
            rows = self._rows(self.sql.topic_create, Statements.topic_create_args(name, partitions, config))
        except PgmsgError as e:
            if not (exist_ok and e.name == "topic_exists"):
                raise
            return next(t for t in self.list_topics() if t.name == name)
        return Topic(*rows[0])

    def list_topics(self) -> List[Topic]:
        """Every topic, by name (topic_list)."""
        return [Topic(*r) for r in self._rows(self.sql.topic_list, {})]

    def describe_topic(self, name: str) -> List[TopicPartition]:
        """The topic's partitions: offsets, record counts, sizes (topic_describe)."""
        return [TopicPartition(*r) for r in self._rows(self.sql.topic_describe, {"name": name})]

    def delete_topic(self, name: str, force: bool = False) -> None:
        """Drops the topic, its records and its groups (topic_delete). A
        topic that has records or groups needs force (else PM011
        topic_not_empty)."""
        self._rows(self.sql.topic_delete, {"name": name, "force": force})

    def list_groups(self, topic: Optional[str] = None, group: Optional[str] = None) -> List[GroupPartition]:
        """One row per group and partition with its lag (group_list); both
        filters optional."""
        return [GroupPartition(*r) for r in self._rows(self.sql.group_list, {"topic": topic, "group": group})]

    def reset_group(self, topic: str, group: str, to: str, partition: Optional[int] = None) -> List[GroupPartition]:
        """Moves the group's cursors (one partition or all) to "earliest",
        "latest", an offset or a time (group_reset; RFC 3339, or a duration
        ago such as "1h"). Claims in progress are fenced."""
        rows = self._rows(self.sql.group_reset, {"topic": topic, "group": group, "to": to, "partition": partition})
        return Statements.to_group_partitions(topic, group, rows)

    def delete_group(self, topic: str, group: str) -> bool:
        """Removes the group's cursors; False if it did not exist (group_delete)."""
        return self._rows(self.sql.group_delete, {"topic": topic, "group": group})[0][0]

    def create_queue(self, name: str, exist_ok: bool = False, **settings: Any) -> Queue:
        """Creates a queue (queue_create); settings are Queue's fields
        (max_attempts, lease, retry_backoff, ..., max_running; durations as
        timedelta), the rest default. PM102 queue_exists if it exists,
        unless exist_ok (then the existing queue is returned unchanged)."""
        rows = self._rows(self.sql.queue_create, Statements.queue_create_args(name, exist_ok, settings))
        return Queue(*rows[0])

    def list_queues(self) -> List[Queue]:
        """Every queue with its settings, by name (queue_list)."""
        return [Queue(*r) for r in self._rows(self.sql.queue_list, {})]

    def describe_queue(self, name: str) -> QueueStats:
        """The queue's job counts by state (queue_stats)."""
        return QueueStats(*self._rows(self.sql.queue_stats, {"name": name})[0])

    def delete_queue(self, name: str, force: bool = False) -> None:
        """Removes the queue with its jobs and archive (queue_delete). A
        queue with jobs (waiting, running or dead) needs force (else PM108
        queue_not_empty)."""
        self._rows(self.sql.queue_delete, {"name": name, "force": force})


class _Pending:
    """Payloads notified and not waited for yet. psycopg hands the
    notifications it reads while running a statement (LISTEN itself: one
    may arrive with its answer) to the connection's handlers and drops them
    otherwise, so they are collected here as well as those read while
    waiting. A set of topic and queue names: bounded, and a stale entry
    costs one early claim."""

    def __init__(self) -> None:
        self.payloads: set = set()

    @staticmethod
    def name(payload: str) -> str:
        """The topic or 'queue:<name>' a payload wakes: the Go client
        notifies 'topic#partition' (names cannot hold '#'), SQL publish()
        the topic."""
        return payload.split("#", 1)[0]

    def handler(self, n: Any) -> None:
        self.payloads.add(self.name(n.payload))

    def take(self, pg: Any, payload: str) -> bool:
        """Collects what libpq holds; True (and forgets it) if payload came."""
        while True:
            n = pg.notifies()
            if n is None:
                break
            self.payloads.add(self.name(n.extra.decode()))
        if payload in self.payloads:
            self.payloads.discard(payload)
            return True
        return False


class Listener:
    """LISTEN on the schema's channel on a dedicated connection. Wake-ups
    only: callers poll anyway, so a lost connection costs latency, not
    correctness, and is opened again on the next wait."""

    def __init__(self, conninfo: str, statements: Statements):
        self.conninfo = conninfo
        self.sql = statements
        self.conn: Optional[psycopg.Connection] = None
        self.pending = _Pending()
        # interrupt() writes to this pipe to end a wait from another thread.
        self._wake_r, self._wake_w = os.pipe()

    def _open(self) -> None:
        self.conn = psycopg.connect(self.conninfo, autocommit=True)
        self.conn.add_notify_handler(self.pending.handler)
        self.conn.execute(self.sql.listen)

    def wait(self, payload: str, timeout: float) -> bool:
        """Waits up to timeout seconds for a notification with `payload`
        (a topic name, or 'queue:<name>'); True if one came."""
        deadline = time.monotonic() + timeout
        try:
            if self.conn is None or self.conn.closed:
                self._open()
            assert self.conn is not None
            pg = self.conn.pgconn
            while True:
                # psycopg 3.1 has no notifies(timeout=): take what libpq
                # already parsed, else wait for the socket and parse.
                if self.pending.take(pg, payload):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ready, _, _ = select.select([self.conn.fileno(), self._wake_r], [], [], left)
                if not ready:
                    return False
                if self._wake_r in ready:
                    os.read(self._wake_r, 512)
                    return False
                pg.consume_input()
        except (psycopg.Error, OSError) as e:
            log.info("pgmsg: listener lost (%s); polling until it is back", e)
            self._disconnect()
            select.select([self._wake_r], [], [], max(0.0, deadline - time.monotonic()))  # stop() ends it
            return False

    def interrupt(self) -> None:
        """Ends a wait in progress (thread-safe)."""
        os.write(self._wake_w, b"x")

    def _disconnect(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None

    def close(self) -> None:
        self._disconnect()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def _lost_claim() -> Iterator[None]:
    """A claim that expired or was taken over (PM008, PM009) is not the
    loop's error: its records are delivered again, to whoever claims next."""
    try:
        yield
    except PgmsgError as e:
        if e.code not in ("PM008", "PM009"):
            raise
        log.warning("pgmsg: claim lost before its commit: %s", e)


class _Heartbeat:
    """Calls beat every interval seconds on a thread while a handler runs.
    A beat that fails (the lease was lost) is logged and stops the beats:
    the commit or completion that follows reports the loss."""

    def __init__(self, interval: float, beat: Callable[[], None]):
        self.interval = interval
        self.beat = beat
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.beat()
            except Exception as e:  # noqa: BLE001 - reported by the commit
                log.warning("pgmsg: heartbeat failed: %s", e)
                return

    def __enter__(self) -> "_Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped.set()
        self.thread.join()


class _Loop:
    """What Consumer and Worker share: a connection of their own (autocommit,
    each call its own transaction), a Listener, and a stop event."""

    def __init__(self, conninfo: str, schema: str, listen: bool, poll_interval: float):
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.client = Client(self.conn, schema)
        self.listener = Listener(conninfo, self.client.sql) if listen else None
        self.poll_interval = poll_interval
        self.stop_event = threading.Event()

    def stop(self) -> None:
        """Makes run() return after the claim in hand (thread-safe)."""
        self.stop_event.set()
        if self.listener is not None:
            self.listener.interrupt()

    def _idle(self, payload: str) -> None:
        if self.listener is not None:
            self.listener.wait(payload, self.poll_interval)
        else:
            self.stop_event.wait(self.poll_interval)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        self.conn.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Consumer(_Loop):
    """Consumes a topic as a consumer group: claim, handle, commit.

    handler(claim) gets one partition's records in offset order. Returning
    commits them; raising releases the claim, so the same records come
    again (after retry_backoff seconds), in order. While the handler runs
    the claim is extended every third of its lease. Several Consumers of
    one group (in any process or language) share the partitions: a claimed
    partition is nobody else's until its claim ends.
    """

    def __init__(
        self,
        conninfo: str,
        topic: str,
        group: str,
        *,
        schema: str = "pgmsg",
        max_records: int = 100,
        lease: timedelta = timedelta(seconds=30),
        poll_interval: float = 1.0,
        retry_backoff: float = 1.0,
        start: str = "earliest",
        listen: bool = True,
    ):
        super().__init__(conninfo, schema, listen, poll_interval)
        self.topic, self.group = topic, group
        self.max_records, self.lease, self.start = max_records, lease, start
        self.retry_backoff = retry_backoff

    def run_once(self, handler: Callable[[Claim], None]) -> bool:
        """One claim, handled and committed (or released). False: nothing to read."""
        c = self.client
        claim = c.claim(self.topic, self.group, self.max_records, self.lease, start=self.start)
        if claim is None:
            return False
        try:
            with _Heartbeat(heartbeat_interval(self.lease), lambda: c.extend(claim, self.lease)):
                handler(claim)
        except Exception as e:  # noqa: BLE001 - the handler's error: deliver again
            log.warning("pgmsg: handler failed on %s[%d] from offset %s: %s",
                        self.topic, claim.partition, claim.records[0].offset, e)
            with _lost_claim():
                c.release(claim)
            self.stop_event.wait(self.retry_backoff)
            return True
        with _lost_claim():
            c.commit(claim)
        return True

    def run(self, handler: Callable[[Claim], None]) -> None:
        """Runs until stop(): claims while there is something to read, else
        waits for a publish notification or poll_interval."""
        while not self.stop_event.is_set():
            if not self.run_once(handler):
                self._idle(self.topic)


class Worker(_Loop):
    """Works a queue: claim, handle, complete or fail.

    handler(job) returns the job's result (any JSON value, or None), which
    completes it; raising fails the attempt with the error's text (retried
    after the queue's backoff, dead after its last attempt). While the
    handler runs, the claimed jobs' leases are extended every third of the
    lease. batch jobs are claimed at a time and handled one after another.
    """

    def __init__(
        self,
        conninfo: str,
        queue: str,
        *,
        schema: str = "pgmsg",
        batch: int = 1,
        lease: Optional[timedelta] = None,
        worker_id: Optional[str] = None,
        poll_interval: float = 1.0,
        listen: bool = True,
    ):
        super().__init__(conninfo, schema, listen, poll_interval)
        self.queue, self.batch, self.lease, self.worker_id = queue, batch, lease, worker_id

    def run_once(self, handler: Callable[[Job], Any]) -> int:
        """One claim of up to batch jobs, each handled; returns how many."""
        c = self.client
        jobs = c.claim_jobs(self.queue, self.batch, self.lease, self.worker_id)
        pending = list(jobs)
        for job in jobs:
            # The beat extends every job of the claim not finished yet.
            with _Heartbeat(heartbeat_interval(job_lease(job)), lambda: c.extend_jobs(pending, self.lease)):
                try:
                    result = handler(job)
                except Exception as e:  # noqa: BLE001 - the handler's error fails the attempt
                    err: Optional[Exception] = e
                else:
                    err = None
            pending.remove(job)
            try:
                if err is None:
                    c.complete(job, result, log=job.log_text())
                else:
                    c.fail(job, f"{type(err).__name__}: {err}", log=job.log_text())
            except Exception as e:  # noqa: BLE001 - a lost lease: the job runs again elsewhere
                log.warning("pgmsg: finishing job %d failed: %s", job.id, e)
        return len(jobs)

    def run(self, handler: Callable[[Job], Any]) -> None:
        """Runs until stop(): claims while jobs are claimable, else waits
        for an enqueue notification or poll_interval. The queue is created
        (default settings) if it does not exist, as enqueue would."""
        self.client.ensure_queue(self.queue)
        while not self.stop_event.is_set():
            if self.run_once(handler) == 0:
                self._idle("queue:" + self.queue)
