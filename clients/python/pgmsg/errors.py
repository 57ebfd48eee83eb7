"""Errors: every error the SQL API raises has SQLSTATE class PM.

PgmsgError carries that code and the server's message; the names are the
ones the Go library's sentinels and the HTTP API use (docs/sql-api.md).
"""

from __future__ import annotations

from typing import Optional

import psycopg

# code -> stable name, as in errors.go / queue_errors.go / token.go.
CODES = {
    "PM001": "unknown_topic",
    "PM002": "topic_exists",
    "PM003": "invalid_name",
    "PM004": "invalid_argument",
    "PM005": "partition_out_of_range",
    "PM006": "record_too_large",
    "PM007": "unknown_group",
    "PM008": "claim_expired",
    "PM009": "claim_not_held",
    "PM010": "empty_batch",
    "PM011": "invalid_offset",
    "PM012": "not_assigned",
    "PM013": "not_member",
    "PM014": "backpressure",
    "PM015": "out_of_order_sequence",
    "PM017": "topic_not_empty",
    "PM101": "unknown_queue",
    "PM102": "queue_exists",
    "PM103": "payload_too_large",
    "PM104": "invalid_delay",
    "PM105": "invalid_max_attempts",
    "PM106": "job_not_held",
    "PM107": "unknown_job",
    "PM108": "queue_not_empty",
    "PM109": "queue_full",
    "PM110": "job_not_waiting",
    "PM111": "unknown_periodic_job",
    "PM112": "invalid_schedule",
    "PM113": "limit_key_missing",
    "PM114": "unknown_dependency",
    "PM115": "dependency_queue",
    "PM116": "dependency_cycle",
    "PM117": "too_many_dependencies",
    "PM118": "invalid_tenant",
    "PM119": "invalid_tenant_weight",
    "PM122": "invalid_step_name",
    "PM123": "step_too_large",
    "PM120": "invalid_batch_callback",
    "PM121": "unknown_batch",
    "PM124": "not_enough_replicas",
    "PMA01": "unknown_token",
    "PMA02": "invalid_token",
    "PMA03": "token_exists",
}


class PgmsgError(Exception):
    """An error raised by a pgmsg SQL function.

    code is the SQLSTATE (PM001 ...), name its stable name (unknown_topic
    ...), message the server's message; __cause__ is the psycopg error.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"{code} {CODES.get(code, 'unknown')}: {message}")
        self.code = code
        self.name = CODES.get(code, "unknown")
        self.message = message


def translate(err: psycopg.Error) -> Optional[PgmsgError]:
    """The PgmsgError for a psycopg error raised by pgmsg, else None."""
    code = getattr(err, "sqlstate", None)
    if code and code.startswith("PM"):
        diag = err.diag.message_primary or str(err)
        return PgmsgError(code, diag)
    return None
