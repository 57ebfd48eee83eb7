"""The asyncio client: AsyncClient, AsyncConsumer and AsyncWorker mirror
Client, Consumer and Worker (pgmsg.client) on psycopg's AsyncConnection."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from datetime import timedelta
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence

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
from .client import _Pending
from .errors import PgmsgError, translate

log = logging.getLogger("pgmsg")


@contextlib.asynccontextmanager
async def _errors() -> AsyncIterator[None]:
    try:
        yield
    except psycopg.Error as e:
        pe = translate(e)
        if pe is None:
            raise
        raise pe from e


class AsyncClient:
    """Client (pgmsg.client) on an AsyncConnection the caller owns."""

    def __init__(self, conn: psycopg.AsyncConnection, schema: str = "pgmsg"):
        self.conn = conn
        self.sql = Statements(schema)

    async def _rows(self, query: Any, args: dict) -> List[tuple]:
        async with _errors(), self.conn.cursor() as cur:
            await cur.execute(query, args)
            return await cur.fetchall()

    async def publish(self, topic: str, records: Sequence[Record], partition: Optional[int] = None) -> List[PublishResult]:
        rows = await self._rows(self.sql.publish, Statements.publish_args(topic, records, partition))
        return [PublishResult(*r) for r in rows]

    async def claim(
        self,
        topic: str,
        group: str,
        max_records: int = 100,
        lease: timedelta = timedelta(seconds=30),
        partition: Optional[int] = None,
        start: str = "earliest",
    ) -> Optional[Claim]:
        rows = await self._rows(
            self.sql.claim,
            {"topic": topic, "group": group, "max_records": max_records, "lease": lease,
             "partition": partition, "start": start},
        )
        return Statements.to_claim(topic, group, rows)

    async def commit(self, claim: Claim) -> int:
        return (await self._rows(self.sql.commit, Statements.claim_key(claim)))[0][0]

    async def release(self, claim: Claim) -> None:
        await self._rows(self.sql.release, Statements.claim_key(claim))

    async def extend(self, claim: Claim, lease: timedelta = timedelta(seconds=30)) -> None:
        args = Statements.claim_key(claim)
        args["lease"] = lease
        claim.expires_at = (await self._rows(self.sql.extend, args))[0][0]

    async def enqueue(self, queue: str, payload: bytes, **opts: Any) -> EnqueueResult:
        return (await self.enqueue_many(queue, [JobSpec(payload=payload, **opts)]))[0]

    async def enqueue_many(self, queue: str, jobs: Sequence[JobSpec]) -> List[EnqueueResult]:
        rows = await self._rows(self.sql.enqueue_many, Statements.enqueue_args(queue, jobs))
        return [EnqueueResult(*r) for r in rows]

    async def enqueue_batch(
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
        rows = await self._rows(
            self.sql.job_enqueue_batch, Statements.enqueue_batch_args(queue, jobs, on_complete, on_discard, on_finished)
        )
        return Statements.to_batch_result(rows)

    async def get_batch(self, batch_id: int) -> Batch:
        """The batch's counts by state and callbacks (batch_get()); PM121 unknown."""
        return Batch(*(await self._rows(self.sql.batch_get, {"id": batch_id}))[0])

    async def ensure_queue(self, queue: str) -> None:
        await self._rows(self.sql.queue_ensure, {"queue": queue})

    async def claim_jobs(
        self, queue: str, limit: int = 1, lease: Optional[timedelta] = None, worker: Optional[str] = None
    ) -> List[Job]:
        rows = await self._rows(self.sql.job_claim, {"queue": queue, "limit": limit, "lease": lease, "worker": worker})
        return [Statements.to_job(r) for r in rows]

    async def complete(self, job: Job, result: Any = None, log: Optional[str] = None) -> None:
        res = None if result is None else json.dumps(result)
        await self._rows(self.sql.job_complete, {"id": job.id, "token": job.lease_token, "result": res, "log": log})

    async def fail(
        self, job: Job, error: str, retry_in: Optional[timedelta] = None, dead: bool = False, log: Optional[str] = None
    ) -> str:
        rows = await self._rows(
            self.sql.job_fail,
            {"id": job.id, "token": job.lease_token, "error": error, "retry_in": retry_in, "dead": dead, "log": log},
        )
        return rows[0][0]

    async def job_logs(self, job_id: int) -> List[JobLog]:
        return [JobLog(*r) for r in await self._rows(self.sql.job_logs, {"id": job_id})]

    async def job_steps(self, job_id: int) -> List[JobStep]:
        return [JobStep(*r) for r in await self._rows(self.sql.job_steps, {"id": job_id})]

    async def save_step(self, job: Job, name: str, output: Any = None) -> None:
        out = None if output is None else json.dumps(output)
        await self._rows(self.sql.job_step_save, {"id": job.id, "token": job.lease_token, "name": name, "output": out})

    async def step(self, job: Job, name: str, fn: Callable[[], Any]) -> Any:
        """Client.step: fn may be a coroutine function (its result is
        awaited) or a plain one."""
        check_step_name(name)
        if job.steps_done is None:
            job.steps_done = {s.name: s.output for s in await self.job_steps(job.id)}
        if name in job.steps_done:
            return job.steps_done[name]
        out = fn()
        if inspect.isawaitable(out):
            out = await out
        await self.save_step(job, name, out)
        job.steps_done[name] = out
        return out

    async def extend_job(self, job: Job, lease: Optional[timedelta] = None) -> None:
        rows = await self._rows(self.sql.job_extend, {"id": job.id, "token": job.lease_token, "lease": lease})
        job.lease_expires_at = rows[0][0]

    async def extend_jobs(self, jobs: Sequence[Job], lease: Optional[timedelta] = None) -> List[int]:
        if not jobs:
            return []
        rows = await self._rows(
            self.sql.job_extend_many,
            {"ids": [j.id for j in jobs], "tokens": [j.lease_token for j in jobs], "lease": lease},
        )
        return [r[0] for r in rows]

    async def snooze(self, job: Job, delay: timedelta = timedelta(0), log: Optional[str] = None) -> None:
        await self._rows(self.sql.job_snooze, {"id": job.id, "token": job.lease_token, "delay": delay, "log": log})

    # Administration: Client's methods of the same names.

    async def create_topic(
        self, name: str, partitions: int = 1, config: Optional[Dict[str, Any]] = None, exist_ok: bool = False
    ) -> Topic:
        try:
            rows = await self._rows(self.sql.topic_create, Statements.topic_create_args(name, partitions, config))
        except PgmsgError as e:
            if not (exist_ok and e.name == "topic_exists"):
                raise
            return next(t for t in await self.list_topics() if t.name == name)
        return Topic(*rows[0])

    async def list_topics(self) -> List[Topic]:
        return [Topic(*r) for r in await self._rows(self.sql.topic_list, {})]

    async def describe_topic(self, name: str) -> List[TopicPartition]:
        return [TopicPartition(*r) for r in await self._rows(self.sql.topic_describe, {"name": name})]

    async def delete_topic(self, name: str, force: bool = False) -> None:
        await self._rows(self.sql.topic_delete, {"name": name, "force": force})

    async def list_groups(self, topic: Optional[str] = None, group: Optional[str] = None) -> List[GroupPartition]:
        return [GroupPartition(*r) for r in await self._rows(self.sql.group_list, {"topic": topic, "group": group})]

    async def reset_group(
        self, topic: str, group: str, to: str, partition: Optional[int] = None
    ) -> List[GroupPartition]:
        rows = await self._rows(self.sql.group_reset, {"topic": topic, "group": group, "to": to, "partition": partition})
        return Statements.to_group_partitions(topic, group, rows)

    async def delete_group(self, topic: str, group: str) -> bool:
        return (await self._rows(self.sql.group_delete, {"topic": topic, "group": group}))[0][0]

    async def create_queue(self, name: str, exist_ok: bool = False, **settings: Any) -> Queue:
        rows = await self._rows(self.sql.queue_create, Statements.queue_create_args(name, exist_ok, settings))
        return Queue(*rows[0])

    async def list_queues(self) -> List[Queue]:
        return [Queue(*r) for r in await self._rows(self.sql.queue_list, {})]

    async def describe_queue(self, name: str) -> QueueStats:
        return QueueStats(*(await self._rows(self.sql.queue_stats, {"name": name}))[0])

    async def delete_queue(self, name: str, force: bool = False) -> None:
        await self._rows(self.sql.queue_delete, {"name": name, "force": force})


class AsyncListener:
    """Listener (pgmsg.client) for asyncio: the event loop watches the
    socket, libpq parses what arrived."""

    def __init__(self, conninfo: str, statements: Statements):
        self.conninfo = conninfo
        self.sql = statements
        self.conn: Optional[psycopg.AsyncConnection] = None
        self.pending = _Pending()

    async def wait(self, payload: str, timeout: float, stop: Optional[asyncio.Event] = None) -> bool:
        """Waits up to timeout seconds for a notification with payload, or
        until stop is set; True if one came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            if self.conn is None or self.conn.closed:
                self.conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
                self.conn.add_notify_handler(self.pending.handler)
                await self.conn.execute(self.sql.listen)
            pg = self.conn.pgconn
            fd = self.conn.fileno()
            while True:
                if self.pending.take(pg, payload):
                    return True
                left = deadline - loop.time()
                if left <= 0:
                    return False
                readable = asyncio.Event()
                loop.add_reader(fd, readable.set)
                waits = [asyncio.ensure_future(readable.wait())]
                if stop is not None:
                    waits.append(asyncio.ensure_future(stop.wait()))
                try:
                    await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    loop.remove_reader(fd)
                    for w in waits:
                        w.cancel()
                if not readable.is_set():
                    return False  # timed out or stopped
                pg.consume_input()
        except (psycopg.Error, OSError) as e:
            log.info("pgmsg: listener lost (%s); polling until it is back", e)
            await self.close()
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            return False

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
            self.conn = None


@contextlib.asynccontextmanager
async def _heartbeat(interval: float, beat: Callable[[], Awaitable[Any]]) -> AsyncIterator[None]:
    """Awaits beat every interval seconds while the body runs; a failed beat
    (lease lost) is logged and stops the beats."""

    async def run() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await beat()
            except Exception as e:  # noqa: BLE001 - reported by the commit
                log.warning("pgmsg: heartbeat failed: %s", e)
                return

    task = asyncio.create_task(run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class _AsyncLoop:
    def __init__(self, conninfo: str, schema: str, listen: bool, poll_interval: float):
        self.conninfo, self.schema, self.listen = conninfo, schema, listen
        self.poll_interval = poll_interval
        self.stop_event = asyncio.Event()
        self.conn: Optional[psycopg.AsyncConnection] = None
        self.listener: Optional[AsyncListener] = None

    async def open(self) -> None:
        """Connects; run() calls it when needed."""
        if self.conn is None:
            self.conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
            self.client = AsyncClient(self.conn, self.schema)
            if self.listen:
                self.listener = AsyncListener(self.conninfo, self.client.sql)

    def stop(self) -> None:
        self.stop_event.set()

    async def _idle(self, payload: str) -> None:
        if self.listener is not None:
            await self.listener.wait(payload, self.poll_interval, self.stop_event)
        else:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop_event.wait(), self.poll_interval)

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.close()
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def __aenter__(self) -> Any:
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncConsumer(_AsyncLoop):
    """Consumer (pgmsg.client) for asyncio: handler is a coroutine function."""

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

    async def _settle(self, fn: Callable[[Claim], Awaitable[Any]], claim: Claim) -> None:
        try:
            await fn(claim)
        except PgmsgError as e:
            if e.code not in ("PM008", "PM009"):
                raise
            log.warning("pgmsg: claim lost before its commit: %s", e)

    async def run_once(self, handler: Callable[[Claim], Awaitable[None]]) -> bool:
        await self.open()
        c = self.client
        claim = await c.claim(self.topic, self.group, self.max_records, self.lease, start=self.start)
        if claim is None:
            return False
        try:
            async with _heartbeat(heartbeat_interval(self.lease), lambda: c.extend(claim, self.lease)):
                await handler(claim)
        except Exception as e:  # noqa: BLE001 - the handler's error: deliver again
            log.warning("pgmsg: handler failed on %s[%d]: %s", self.topic, claim.partition, e)
            await self._settle(c.release, claim)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop_event.wait(), self.retry_backoff)
            return True
        await self._settle(c.commit, claim)
        return True

    async def run(self, handler: Callable[[Claim], Awaitable[None]]) -> None:
        while not self.stop_event.is_set():
            if not await self.run_once(handler):
                await self._idle(self.topic)


class AsyncWorker(_AsyncLoop):
    """Worker (pgmsg.client) for asyncio: handler is a coroutine function."""

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

    async def run_once(self, handler: Callable[[Job], Awaitable[Any]]) -> int:
        await self.open()
        c = self.client
        jobs = await c.claim_jobs(self.queue, self.batch, self.lease, self.worker_id)
        pending = list(jobs)
        for job in jobs:
            err: Optional[Exception] = None
            result: Any = None
            async with _heartbeat(heartbeat_interval(job_lease(job)), lambda: c.extend_jobs(pending, self.lease)):
                try:
                    result = await handler(job)
                except Exception as e:  # noqa: BLE001 - the handler's error fails the attempt
                    err = e
            pending.remove(job)
            try:
                if err is None:
                    await c.complete(job, result, log=job.log_text())
                else:
                    await c.fail(job, f"{type(err).__name__}: {err}", log=job.log_text())
            except Exception as e:  # noqa: BLE001 - a lost lease: the job runs again elsewhere
                log.warning("pgmsg: finishing job %d failed: %s", job.id, e)
        return len(jobs)

    async def run(self, handler: Callable[[Job], Awaitable[Any]]) -> None:
        await self.open()
        await self.client.ensure_queue(self.queue)
        while not self.stop_event.is_set():
            if await self.run_once(handler) == 0:
                await self._idle("queue:" + self.queue)
