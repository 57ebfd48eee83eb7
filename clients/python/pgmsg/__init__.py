"""pgmsg: a thin Python client of pgmsg's SQL API (docs/sql-api.md).

Client makes single calls on a psycopg 3 connection you own; Consumer and
Worker run the consume and work loops on connections of their own;
pgmsg.aio has the same for asyncio.
"""

from ._common import (
    Batch,
    BatchResult,
    Claim,
    EnqueueResult,
    GroupPartition,
    LOG_MAX_BYTES,
    Job,
    JobLog,
    JobSpec,
    JobStep,
    PublishResult,
    Queue,
    QueueStats,
    Record,
    Topic,
    TopicPartition,
)
from .client import Client, Consumer, Listener, Worker
from .errors import CODES, PgmsgError

__all__ = [
    "Batch",
    "BatchResult",
    "CODES",
    "Claim",
    "Client",
    "Consumer",
    "EnqueueResult",
    "GroupPartition",
    "Job",
    "JobLog",
    "JobSpec",
    "JobStep",
    "LOG_MAX_BYTES",
    "Listener",
    "PgmsgError",
    "PublishResult",
    "Queue",
    "QueueStats",
    "Record",
    "Topic",
    "TopicPartition",
    "Worker",
]
__version__ = "0.1.0"
