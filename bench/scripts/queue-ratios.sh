#!/bin/bash
# The queue's throughput against River and the seeds' SQL, and the held
# snapshot ratio, alternating in one script (docs/benchmarks.md, "The
# queue's hot path, second pass"). Usage, from the repository root:
#   go build -o /tmp/pgmsg ./cmd/pgmsg && (cd bench/peers && go build -o /tmp/peers .)
#   URL=postgres://... bash bench/scripts/queue-ratios.sh
set -u
URL=${URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
PGMSG=${PGMSG:-/tmp/pgmsg}
PEERS=${PEERS:-/tmp/peers}
Q="$PGMSG --database-url $URL --schema pgmsg_bench bench queue"
P="$PEERS --database-url $URL --schema pgmsg_bench_p"
for r in 1 2 3; do
  echo "round $r pgmsg256 $($Q --workers 256 --jobs 400000 --duration 15s 2>&1 | grep jobs_per_sec)"
  echo "round $r river2000 $($P --impl river --workers 2000 --jobs 200000 --duration 15s 2>&1 | grep jobs_per_sec)"
  echo "round $r seed16 $($P --impl seed --workers 16 --jobs 100000 --duration 15s 2>&1 | grep jobs_per_sec)"
done
for r in 1 2; do
  echo "snap $r plain $($Q --workers 32 --jobs 400000 --duration 30s 2>&1 | grep jobs_per_sec)"
  echo "snap $r held $($Q --workers 32 --jobs 400000 --duration 30s --hold-snapshot 2>&1 | grep jobs_per_sec)"
done
