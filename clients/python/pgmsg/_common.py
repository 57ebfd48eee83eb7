"""What the sync and asyncio clients share: the types, the SQL they send
and how rows become objects. The SQL functions do the work; this module
only names their arguments and reads their results."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Dict, List, Optional, Sequence, Union

from psycopg import sql

from .errors import PgmsgError


@dataclass
class Record:
    """One record of a topic. Publish sets value (None: a tombstone) and
    optionally key, headers (name -> bytes) and timestamp; a claim fills in
    partition, offset and timestamp."""

    value: Optional[bytes]
    key: Optional[bytes] = None
    headers: Optional[Dict[str, bytes]] = None
    timestamp: Optional[datetime] = None
    partition: Optional[int] = None
    offset: Optional[int] = None


@dataclass
class PublishResult:
    """One row of publish(): a partition written, the offset of its first
    record and how many records it took (record i of the partition's share
    has offset base_offset + i)."""

    partition: int
    base_offset: int
    record_count: int
    timestamp: datetime


@dataclass
class Claim:
    """Records of one partition leased to the caller until expires_at.
    epoch identifies the lease for commit, release and extend."""

    topic: str
    group: str
    partition: int
    epoch: int
    expires_at: datetime
    records: List[Record] = field(default_factory=list)


@dataclass
class EnqueueResult:
    """One row of enqueue_many(): the job's id, whether a live job with the
    same unique key was returned instead of a new one, its state and run_at."""

    id: int
    duplicate: bool
    state: str
    run_at: Optional[datetime]


@dataclass
class BatchResult:
    """enqueue_batch()'s answer: the batch's id and each job's result."""

    id: int
    jobs: List[EnqueueResult]


@dataclass
class Batch:
    """batch_get()'s row: the batch's live jobs by state, its final ones by
    how they ended, its callbacks (dicts, None: none) and, once every job was
    final, when and the callback jobs' ids (None: none enqueued)."""

    id: int
    queue: str
    total: int
    created_at: datetime
    pending: int
    available: int
    scheduled: int
    retrying: int
    running: int
    completed: int
    cancelled: int
    dead: int
    finished_at: Optional[datetime]
    on_complete: Optional[Dict[str, Any]]
    on_discard: Optional[Dict[str, Any]]
    on_finished: Optional[Dict[str, Any]]
    complete_job_id: Optional[int]
    discard_job_id: Optional[int]
    finished_job_id: Optional[int]


@dataclass
class Job:
    """A job held by the caller: finish it with (id, lease_token)."""

    id: int
    queue: str
    kind: Optional[str]
    payload: bytes
    priority: int
    attempt: int
    max_attempts: int
    lease_token: int
    lease_expires_at: datetime
    run_at: datetime
    enqueued_at: datetime
    attempted_at: datetime
    unique_key: Optional[str]
    errors: Any
    timeout: Optional[timedelta]
    # Lines the handler logged with log(): a Worker keeps them with the
    # attempt's outcome (job_logs).
    log_lines: List[str] = field(default_factory=list, repr=False, compare=False)
    # The outputs of the steps the job completed, by name: read once per
    # attempt by the first step() call, then kept up to date by it.
    steps_done: Optional[Dict[str, Any]] = field(default=None, repr=False, compare=False)

    def log(self, msg: str, *args: Any) -> None:
        """Logs a line (msg % args) of this attempt: the Worker stores the
        attempt's lines with its outcome, in the same statement, cut at
        LOG_MAX_BYTES (client.job_logs reads them)."""
        self.log_lines.append(msg % args if args else msg)

    def log_text(self, max_bytes: int = 0) -> Optional[str]:
        """The attempt's log as stored: its lines, cut at max_bytes (0:
        LOG_MAX_BYTES) with a last line that says so; None if none."""
        if not self.log_lines:
            return None
        limit = max_bytes or LOG_MAX_BYTES
        text = "".join(line + "\n" for line in self.log_lines).encode()
        if len(text) <= limit:
            return text.decode()
        marker = f"[pgmsg: log truncated at {limit} bytes]\n"
        return text[: max(limit - len(marker), 0)].decode(errors="ignore") + marker


# A step name: 1 to STEP_NAME_MAX_BYTES of A-Z a-z 0-9 . _ - : / (as
# job_step_save checks it, PM122).
STEP_NAME_MAX_BYTES = 200
_STEP_NAME = re.compile(r"[A-Za-z0-9._:/-]{1,%d}" % STEP_NAME_MAX_BYTES)


def check_step_name(name: Any) -> None:
    """Refuses (PgmsgError PM122) a step name job_step_save would refuse,
    before the step's function runs."""
    if not isinstance(name, str) or _STEP_NAME.fullmatch(name) is None:
        raise PgmsgError("PM122", f"invalid step name {name!r}: 1 to {STEP_NAME_MAX_BYTES} of A-Z a-z 0-9 . _ - : /")


# LOG_MAX_BYTES is what one attempt's log keeps by default, as the Go
# worker's (the SQL API cuts any log at 1 MiB).
LOG_MAX_BYTES = 64 << 10


@dataclass
class JobLog:
    """What a job's handler logged during one attempt (job_logs)."""

    attempt: int
    at: datetime
    outcome: str  # completed, retrying, dead or snoozed
    log: str


@dataclass
class JobStep:
    """A step checkpoint a job recorded (job_steps, save_step)."""

    name: str
    attempt: int
    at: datetime
    output: Any


@dataclass
class JobSpec:
    """A job for enqueue_many: the arguments of enqueue(), one job."""

    payload: bytes
    kind: Optional[str] = None
    priority: Optional[int] = None
    run_at: Optional[datetime] = None
    delay: Optional[timedelta] = None
    max_attempts: Optional[int] = None
    unique_key: Optional[str] = None
    timeout: Optional[timedelta] = None
    tags: Optional[List[str]] = None
    metadata: Optional[Dict[str, Any]] = None
    # The queue's jobs with the same sequence_key run one at a time, in
    # enqueue order; a job that goes dead or is cancelled holds its
    # sequence (sequence_resume() in SQL) unless sequence_continue.
    sequence_key: Optional[str] = None
    sequence_continue: Optional[bool] = None
    # The job's key for its queue's key_limit (at most key_limit jobs of a
    # key waiting to run or running at once; the others are pending),
    # instead of the queue's key_field of the payload.
    limit_key: Optional[str] = None
    # Workflows: the job waits (pending) until every dependency completed:
    # ids of jobs of the queue (int) and names (str) of jobs of the same
    # enqueue_many batch; a cancelled or dead dependency cancels it unless
    # ignore_cancelled_deps / ignore_dead_deps.
    name: Optional[str] = None
    depends_on: Optional[List[Union[int, str]]] = None
    ignore_cancelled_deps: Optional[bool] = None
    ignore_dead_deps: Optional[bool] = None
    # Fair share: the job's tenant (1 to 200 of A-Z a-z 0-9 . _ : / = @ + -).
    # A queue whose jobs name tenants serves them by weight, so one tenant's
    # backlog does not starve another's jobs (tenant_weight_set() in SQL).
    tenant: Optional[str] = None


@dataclass
class Topic:
    """A topic as topic_create() and topic_list() return it. config holds
    the settings (retention, compaction, ...) as the SQL API stores them."""

    name: str
    partitions: int
    segment_records: int
    max_record_bytes: int
    config: Dict[str, Any]
    created_at: datetime


@dataclass
class TopicPartition:
    """One row of topic_describe(): a partition's first stored and next
    offsets, its record count and the bytes of its segments."""

    partition: int
    start_offset: int
    next_offset: int
    records: int
    segments: int
    approx_bytes: int


@dataclass
class GroupPartition:
    """One row of group_list() or group_reset(): a group's cursor on one
    partition and, from group_list(), the partition's end and the lag."""

    topic: str
    group: str
    partition: int
    next_offset: int
    end_offset: Optional[int] = None
    lag: Optional[int] = None
    committed_at: Optional[datetime] = None
    skipped: Optional[int] = None


@dataclass
class Queue:
    """A queue's settings as queue_create() and queue_list() return them."""

    name: str
    max_attempts: int
    lease: timedelta
    retry_backoff: timedelta
    retry_backoff_max: timedelta
    archive_retention: timedelta
    max_payload_bytes: int
    max_depth: Optional[int]
    backpressure_timeout: timedelta
    job_timeout: Optional[timedelta]
    dead_retention: Optional[timedelta]
    rate_limit: Optional[float]
    max_running: Optional[int]
    paused: bool
    created_at: datetime


@dataclass
class QueueStats:
    """One row of queue_stats(): live jobs by state, the archive's size,
    the age of the oldest available job (None: none waiting) and the jobs
    archived in the last minute."""

    queue: str
    available: int
    scheduled: int
    running: int
    retrying: int
    dead: int
    archived: int
    oldest_available_seconds: Optional[float]
    archived_last_minute: int


# The settings queue_create() takes, in Queue's field order.
QUEUE_SETTINGS = (
    "max_attempts", "lease", "retry_backoff", "retry_backoff_max", "archive_retention", "max_payload_bytes",
    "max_depth", "backpressure_timeout", "job_timeout", "dead_retention", "rate_limit", "max_running",
)
_QUEUE_CASTS = {
    "max_attempts": "int", "lease": "interval", "retry_backoff": "interval", "retry_backoff_max": "interval",
    "archive_retention": "interval", "max_payload_bytes": "int", "max_depth": "bigint",
    "backpressure_timeout": "interval", "job_timeout": "interval", "dead_retention": "interval",
    "rate_limit": "float8", "max_running": "int",
}
_QUEUE_COLUMNS = ", ".join(("name",) + QUEUE_SETTINGS + ("paused", "created_at"))
_TOPIC_COLUMNS = "name, partitions, segment_records, max_record_bytes, config, created_at"


def encode_headers(h: Optional[Dict[str, bytes]]) -> Optional[str]:
    """Headers as the SQL API stores them: a JSON object of base64 values."""
    if not h:
        return None
    return json.dumps({k: base64.b64encode(v).decode("ascii") for k, v in h.items()})


def decode_headers(h: Any) -> Optional[Dict[str, bytes]]:
    if h is None:
        return None
    if isinstance(h, str):
        h = json.loads(h)
    return {k: base64.b64decode(v) for k, v in h.items()}


def _b(v: Any) -> Optional[bytes]:
    return None if v is None else bytes(v)


def _json_or_none(v: Any) -> Optional[str]:
    return None if v is None else json.dumps(v)


def _parallel(values: Sequence[Any]) -> Optional[List[Any]]:
    """A parallel array argument, or NULL when every entry is NULL (the
    functions read a NULL array as all defaults)."""
    return None if all(v is None for v in values) else list(values)


class Statements:
    """The SQL of every call, for one schema. Identifiers are quoted by
    psycopg.sql, never formatted as text."""

    def __init__(self, schema: str):
        s = sql.Identifier(schema)
        self.schema = schema
        self.channel = schema + "_log"  # pg_notify channel of publish, enqueue
        self.listen = sql.SQL("LISTEN {}").format(sql.Identifier(self.channel))

        def q(text: str) -> sql.Composed:
            return sql.SQL(text).format(s=s)

        self.publish = q(
            "SELECT partition, base_offset, record_count, timestamp FROM {s}.publish("
            "%(topic)s, %(values)s::bytea[], %(keys)s::bytea[], %(headers)s::text[]::jsonb[],"
            " %(timestamps)s::timestamptz[], %(partition)s::int)"
        )
        self.claim = q(
            'SELECT partition, claim_epoch, claim_expires_at, "offset", "timestamp", key, value, headers'
            " FROM {s}.claim(%(topic)s, %(group)s, %(max_records)s, %(lease)s::interval,"
            " p_partition => %(partition)s::int, p_start => %(start)s)"
        )
        self.commit = q("SELECT {s}.commit(%(topic)s, %(group)s, %(partition)s, %(epoch)s)")
        self.release = q("SELECT {s}.release(%(topic)s, %(group)s, %(partition)s, %(epoch)s)")
        self.extend = q("SELECT {s}.extend(%(topic)s, %(group)s, %(partition)s, %(epoch)s, %(lease)s::interval)")
        self.enqueue_many = q(
            "SELECT id, duplicate, state, run_at FROM {s}.enqueue_many(%(queue)s, %(payloads)s::bytea[],"
            " p_kinds => %(kinds)s::text[], p_priorities => %(priorities)s::int[],"
            " p_run_ats => %(run_ats)s::timestamptz[], p_delays => %(delays)s::interval[],"
            " p_max_attempts => %(max_attempts)s::int[], p_unique_keys => %(unique_keys)s::text[],"
            " p_timeouts => %(timeouts)s::interval[], p_tags => %(tags)s::text[]::jsonb[],"
            " p_metadata => %(metadata)s::text[]::jsonb[], p_sequence_keys => %(sequence_keys)s::text[],"
            " p_sequence_continues => %(sequence_continues)s::boolean[], p_limit_keys => %(limit_keys)s::text[],"
            " p_names => %(names)s::text[], p_depends_on => %(depends_on)s::text[]::jsonb[],"
            " p_deps_ignore_cancelled => %(deps_ignore_cancelled)s::boolean[],"
            " p_deps_ignore_dead => %(deps_ignore_dead)s::boolean[], p_tenants => %(tenants)s::text[])"
        )
        # job_enqueue_batch: enqueue_many's arguments and the callbacks.
        self.job_enqueue_batch = q(
            "SELECT batch_id, id, duplicate, state, run_at FROM {s}.job_enqueue_batch(%(queue)s, %(payloads)s::bytea[],"
            " p_kinds => %(kinds)s::text[], p_priorities => %(priorities)s::int[],"
            " p_run_ats => %(run_ats)s::timestamptz[], p_delays => %(delays)s::interval[],"
            " p_max_attempts => %(max_attempts)s::int[], p_unique_keys => %(unique_keys)s::text[],"
            " p_timeouts => %(timeouts)s::interval[], p_tags => %(tags)s::text[]::jsonb[],"
            " p_metadata => %(metadata)s::text[]::jsonb[], p_sequence_keys => %(sequence_keys)s::text[],"
            " p_sequence_continues => %(sequence_continues)s::boolean[], p_limit_keys => %(limit_keys)s::text[],"
            " p_names => %(names)s::text[], p_depends_on => %(depends_on)s::text[]::jsonb[],"
            " p_deps_ignore_cancelled => %(deps_ignore_cancelled)s::boolean[],"
            " p_deps_ignore_dead => %(deps_ignore_dead)s::boolean[], p_tenants => %(tenants)s::text[],"
            " p_on_complete => %(on_complete)s::jsonb, p_on_discard => %(on_discard)s::jsonb,"
            " p_on_finished => %(on_finished)s::jsonb)"
        )
        self.batch_get = q(
            "SELECT batch_id, queue, total, created_at, pending, available, scheduled, retrying, running,"
            " completed, cancelled, dead, finished_at, on_complete, on_discard, on_finished,"
            " complete_job_id, discard_job_id, finished_job_id FROM {s}.batch_get(%(id)s)"
        )
        self.queue_ensure = q("SELECT name FROM {s}.queue_create(%(queue)s, p_if_not_exists => true)")
        self.job_claim = q(
            "SELECT id, queue, kind, payload, priority, attempt, max_attempts, lease_token, lease_expires_at,"
            " run_at, enqueued_at, attempted_at, unique_key, errors, timeout"
            " FROM {s}.job_claim(%(queue)s, %(limit)s, %(lease)s::interval, %(worker)s)"
        )
        self.job_complete = q("SELECT {s}.job_complete(%(id)s, %(token)s, %(result)s::jsonb, %(log)s::text)")
        self.job_fail = q(
            "SELECT state, run_at FROM {s}.job_fail(%(id)s, %(token)s, %(error)s, %(retry_in)s::interval, %(dead)s,"
            " %(log)s::text)"
        )
        self.job_logs = q("SELECT attempt, at, outcome, log FROM {s}.job_logs(%(id)s)")
        self.job_steps = q("SELECT name, attempt, at, output FROM {s}.job_steps(%(id)s)")
        self.job_step_save = q("SELECT {s}.job_step_save(%(id)s, %(token)s, %(name)s, %(output)s::jsonb)")
        self.job_extend = q("SELECT {s}.job_extend(%(id)s, %(token)s, %(lease)s::interval)")
        self.job_extend_many = q(
            "SELECT id, lease_expires_at FROM {s}.job_extend_many(%(ids)s::bigint[], %(tokens)s::bigint[], %(lease)s::interval)"
        )
        self.job_snooze = q("SELECT {s}.job_snooze(%(id)s, %(token)s, %(delay)s::interval, %(log)s::text)")

        # Administration: topics, groups, queues.
        self.topic_create = q(
            "SELECT " + _TOPIC_COLUMNS + " FROM {s}.topic_create(%(name)s, %(partitions)s, %(config)s::jsonb)"
        )
        self.topic_list = q("SELECT " + _TOPIC_COLUMNS + " FROM {s}.topic_list()")
        self.topic_describe = q(
            "SELECT partition, start_offset, next_offset, records, segments, approx_bytes FROM {s}.topic_describe(%(name)s)"
        )
        self.topic_delete = q("SELECT {s}.topic_delete(%(name)s, p_force => %(force)s)")
        self.group_list = q(
            "SELECT topic, group_name, partition, next_offset, end_offset, lag, committed_at, skipped"
            " FROM {s}.group_list(%(topic)s, %(group)s)"
        )
        self.group_reset = q(
            "SELECT partition, next_offset FROM {s}.group_reset(%(topic)s, %(group)s, %(to)s, %(partition)s::int)"
        )
        self.group_delete = q("SELECT {s}.group_delete(%(topic)s, %(group)s)")
        self.queue_create = q(
            "SELECT " + _QUEUE_COLUMNS + " FROM {s}.queue_create(%(name)s, "
            + ", ".join(f"p_{k} => %({k})s::{_QUEUE_CASTS[k]}" for k in QUEUE_SETTINGS)
            + ", p_if_not_exists => %(exist_ok)s)"
        )
        self.queue_list = q("SELECT " + _QUEUE_COLUMNS + " FROM {s}.queue_list()")
        self.queue_stats = q(
            "SELECT queue, available, scheduled, running, retrying, dead, archived,"
            " CASE WHEN available > 0 THEN oldest_available_seconds END, archived_last_minute"
            " FROM {s}.queue_stats(%(name)s)"
        )
        self.queue_delete = q("SELECT {s}.queue_delete(%(name)s, %(force)s)")

    # Arguments -----------------------------------------------------------

    @staticmethod
    def publish_args(topic: str, records: Sequence[Record], partition: Optional[int]) -> Dict[str, Any]:
        return {
            "topic": topic,
            "values": [_b(r.value) for r in records],
            "keys": _parallel([_b(r.key) for r in records]),
            "headers": _parallel([encode_headers(r.headers) for r in records]),
            "timestamps": _parallel([r.timestamp for r in records]),
            "partition": partition,
        }

    @staticmethod
    def enqueue_args(queue: str, jobs: Sequence[JobSpec]) -> Dict[str, Any]:
        return {
            "queue": queue,
            "payloads": [bytes(j.payload) for j in jobs],
            "kinds": _parallel([j.kind for j in jobs]),
            "priorities": _parallel([j.priority for j in jobs]),
            "run_ats": _parallel([j.run_at for j in jobs]),
            "delays": _parallel([j.delay for j in jobs]),
            "max_attempts": _parallel([j.max_attempts for j in jobs]),
            "unique_keys": _parallel([j.unique_key for j in jobs]),
            "timeouts": _parallel([j.timeout for j in jobs]),
            "tags": _parallel([_json_or_none(j.tags) for j in jobs]),
            "metadata": _parallel([_json_or_none(j.metadata) for j in jobs]),
            "sequence_keys": _parallel([j.sequence_key for j in jobs]),
            "sequence_continues": _parallel([j.sequence_continue for j in jobs]),
            "limit_keys": _parallel([j.limit_key for j in jobs]),
            "names": _parallel([j.name for j in jobs]),
            "depends_on": _parallel([_json_or_none(j.depends_on) for j in jobs]),
            "deps_ignore_cancelled": _parallel([j.ignore_cancelled_deps for j in jobs]),
            "deps_ignore_dead": _parallel([j.ignore_dead_deps for j in jobs]),
            "tenants": _parallel([j.tenant for j in jobs]),
        }

    @staticmethod
    def enqueue_batch_args(
        queue: str,
        jobs: Sequence[JobSpec],
        on_complete: Optional[Dict[str, Any]],
        on_discard: Optional[Dict[str, Any]],
        on_finished: Optional[Dict[str, Any]],
    ) -> Dict[str, Any]:
        """A callback is a dict {"kind", "args", "queue", "priority", "metadata"}
        (docs/sql-api.md, Batches); None: none."""
        args = Statements.enqueue_args(queue, jobs)
        args.update(on_complete=_json_or_none(on_complete), on_discard=_json_or_none(on_discard),
                    on_finished=_json_or_none(on_finished))
        return args

    @staticmethod
    def to_batch_result(rows: List[tuple]) -> BatchResult:
        return BatchResult(rows[0][0], [EnqueueResult(*r[1:]) for r in rows])

    @staticmethod
    def topic_create_args(name: str, partitions: int, config: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        return {"name": name, "partitions": partitions, "config": json.dumps(config or {})}

    @staticmethod
    def queue_create_args(name: str, exist_ok: bool, settings: Dict[str, Any]) -> Dict[str, Any]:
        unknown = set(settings) - set(QUEUE_SETTINGS)
        if unknown:
            raise TypeError(f"unknown queue settings {sorted(unknown)}; known: {', '.join(QUEUE_SETTINGS)}")
        args: Dict[str, Any] = {k: settings.get(k) for k in QUEUE_SETTINGS}
        args.update(name=name, exist_ok=exist_ok)
        return args

    @staticmethod
    def to_group_partitions(topic: str, group: str, rows: List[tuple]) -> List[GroupPartition]:
        """group_reset()'s rows (partition, next_offset)."""
        return [GroupPartition(topic, group, r[0], r[1]) for r in rows]

    @staticmethod
    def claim_key(claim: Claim) -> Dict[str, Any]:
        return {"topic": claim.topic, "group": claim.group, "partition": claim.partition, "epoch": claim.epoch}

    # Results ---------------------------------------------------------------

    @staticmethod
    def to_claim(topic: str, group: str, rows: List[tuple]) -> Optional[Claim]:
        if not rows:
            return None
        part, epoch, expires = rows[0][0], rows[0][1], rows[0][2]
        recs = [
            Record(value=_b(r[6]), key=_b(r[5]), headers=decode_headers(r[7]), timestamp=r[4], partition=r[0], offset=r[3])
            for r in rows
        ]
        return Claim(topic=topic, group=group, partition=part, epoch=epoch, expires_at=expires, records=recs)

    @staticmethod
    def to_job(r: tuple) -> Job:
        return Job(
            id=r[0], queue=r[1], kind=r[2], payload=bytes(r[3]), priority=r[4], attempt=r[5],
            max_attempts=r[6], lease_token=r[7], lease_expires_at=r[8], run_at=r[9],
            enqueued_at=r[10], attempted_at=r[11], unique_key=r[12], errors=r[13], timeout=r[14],
        )


def job_lease(job: Job) -> timedelta:
    """The lease the claim gave the job (both times are the database's)."""
    return job.lease_expires_at - job.attempted_at


def heartbeat_interval(lease: timedelta) -> float:
    """Extend a third of the way into a lease: two chances before it ends."""
    return max(lease.total_seconds() / 3, 0.05)
