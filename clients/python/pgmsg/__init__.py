"""pgmsg: a thin Python client of pgmsg's SQL API (docs/sql-api.md).

Client makes single calls on a psycopg 3 connection you own; Consumer and
Worker run the consume and work loops on connections of their own;
pgmsg.aio has the same for asyncio.
"""

from ._common import Claim, EnqueueResult, Job, JobSpec, PublishResult, Record
from .client import Client, Consumer, Listener, Worker
from .errors import CODES, PgmsgError

__all__ = [
    "CODES",
    "Claim",
    "Client",
    "Consumer",
    "EnqueueResult",
    "Job",
    "JobSpec",
    "Listener",
    "PgmsgError",
    "PublishResult",
    "Record",
    "Worker",
]
__version__ = "0.1.0"
