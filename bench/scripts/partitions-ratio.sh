#!/bin/bash
# One topic of 256 partitions read by a group of 16 members against the
# same load on 4 partitions (one member each), alternating in one script
# (docs/benchmarks.md, "Scale"): 64 producers, batch 100, one group. The
# summary's settle_s is how long the 16 members' join took until every
# partition was owned and each member held its 16. Usage, from the
# repository root:
#   go build -o /tmp/pgmsg ./cmd/pgmsg
#   URL=postgres://... bash bench/scripts/partitions-ratio.sh [rounds] [duration] [warmup]
# The warm-up (default 3s) is not measured. A new topic of 256 partitions
# creates its 512 segments of headroom (_segments_ahead) during its first
# minute or two under this load, while the 4-partition topic's 8 take a
# second: a warm-up of 120s measures both topics once that is done.
set -u
URL=${URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
PGMSG=${PGMSG:-/tmp/pgmsg}
ROUNDS=${1:-3}
DUR=${2:-10s}
WARMUP=${3:-3s}
B="$PGMSG --database-url $URL --schema pgmsg_bench bench pubsub --producers 64 --batch 100 --groups 1 --duration $DUR --warmup $WARMUP"
for r in $(seq "$ROUNDS"); do
  echo "round $r p4   $($B --partitions 4 2>&1 | grep -E '^(writes|reads)_per_sec|cpu_per_record' | tr -s ' ' | tr '\n' ' ')"
  echo "round $r p256 $($B --partitions 256 --members 16 2>&1 | grep -E '^(writes|reads)_per_sec|cpu_per_record|^settle_s' | tr -s ' ' | tr '\n' ' ')"
done
