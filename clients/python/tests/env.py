"""The test database: PGMSG_TEST_DATABASE_URL and PGMSG_TEST_SCHEMA, a
migrated schema of the test's own. `go test ./clients` (which `make ci`
runs) sets both and drops the schema afterwards; see clients/README.md."""

import os
import sys
import uuid

import psycopg

URL = os.environ.get("PGMSG_TEST_DATABASE_URL", "")
SCHEMA = os.environ.get("PGMSG_TEST_SCHEMA", "")
if not URL or not SCHEMA:
    sys.exit("pgmsg tests: PGMSG_TEST_DATABASE_URL and PGMSG_TEST_SCHEMA (a migrated schema) must be set; "
             "run them with `go test ./clients -run TestClients/PythonSuite`")


def name(prefix: str) -> str:
    """A topic, group or queue name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def tagged_url(tag: str) -> str:
    """URL with an application_name, so a test can find its loop's
    connections in pg_stat_activity."""
    return URL + ("&" if "?" in URL else "?") + "application_name=" + tag


def listening(conn: psycopg.Connection, tag: str) -> bool:
    """Whether the loop connected with tagged_url(tag) is waiting in LISTEN."""
    return bool(conn.execute(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN %%' AND state = 'idle'",
        (tag,)).fetchall())


def connect() -> psycopg.Connection:
    return psycopg.connect(URL, autocommit=True)


def sql(conn: psycopg.Connection, text: str, *args):
    """Runs text with {s} replaced by the quoted schema (test SQL only)."""
    return conn.execute(text.replace("{s}", '"' + SCHEMA + '"'), args).fetchall()


def wait_until(pred, what: str, timeout: float = 60.0, step: float = 0.05):
    """Polls pred until it is truthy. The timeout only bounds a broken run;
    no assertion depends on how fast the machine is."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)
