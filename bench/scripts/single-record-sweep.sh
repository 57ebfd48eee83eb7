#!/bin/bash
# Single-record publishes (issue 55): pgmsg with 64 callers against the
# seed's batch-1 SQL at every producer count from 1 to 64, alternating in
# one script, so that the ratio is taken against the seed's best (not its
# worst, 64, where its counter row serialises the producers). Also
# prints the WAL flush time of the data directory's disk (pg_test_fsync),
# which bounds both sides: a record is acknowledged after a flush.
# Usage, from the repository root:
#   go build -o /tmp/pgmsg ./cmd/pgmsg
#   URL=postgres://... bash bench/scripts/single-record-sweep.sh [rounds] [duration]
set -u
URL=${URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
PGMSG=${PGMSG:-/tmp/pgmsg}
ROUNDS=${1:-3}
DUR=${2:-8s}
B="$PGMSG --database-url $URL --schema pgmsg_bench bench pubsub --force --batch 1 --partitions 4 --groups 0 --duration $DUR --warmup 3s"
fig() { grep -E '^(writes_per_sec|publish_p99_ms|e2e_p99_ms)' | tr -s ' ' | tr '\n' ' '; }
for r in $(seq "$ROUNDS"); do
  echo "round $r pgmsg 64: $($B --producers 64 2>&1 | fig)"
  for p in 1 2 4 8 16 32 64; do
    echo "round $r seed $p: $($B --impl seed --producers $p 2>&1 | fig)"
  done
done
if command -v pg_test_fsync >/dev/null || [ -x /usr/lib/postgresql/15/bin/pg_test_fsync ]; then
  F=$(command -v pg_test_fsync || echo /usr/lib/postgresql/15/bin/pg_test_fsync)
  echo "WAL flush (fdatasync, one 8 kB write): $($F -s 2 -f "${FSYNC_FILE:-/var/lib/postgresql/pg_test_fsync.tmp}" 2>/dev/null | grep -m1 -E '^\s+fdatasync' | tr -s ' ')"
  rm -f "${FSYNC_FILE:-/var/lib/postgresql/pg_test_fsync.tmp}"
fi
