#!/bin/bash
# Server CPU of 1,000 group members heartbeating at the default interval,
# this tree against an older commit (default: main), alternating in one
# script (docs/benchmarks.md, "Many members"). Each run starts its own
# throwaway PostgreSQL (so /proc holds only its work) and builds 25 topics
# before the heartbeats (250 groups of 4, 10 to a topic). Usage, from the
# repository root:
#   bash bench/scripts/heartbeat-ratio.sh [base-ref] [rounds] [heartbeat-for]
set -eu
BASE=${1:-main}
ROUNDS=${2:-2}
FOR=${3:-60s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
git archive "$BASE" | tar -x -C "$tmp/src"
(cd "$tmp/src" && go build -o "$tmp/old" ./cmd/pgmsg)
go build -o "$tmp/new" ./cmd/pgmsg
run() {
  env -u DATABASE_URL -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER \
    "$@" --topics 25 --partitions 4 --members 1000 --members-per-group 4 \
    --heartbeat-for "$FOR" --idle 0 --repeat 1 2>/dev/null | grep -E 'members heartbeating|floor'
}
# This tree's run also measures the floor (SELECT 1 by as many callers)
# after its heartbeats.
for r in $(seq "$ROUNDS"); do
  echo "round $r $BASE:"; run "$tmp/old" bench scale
  echo "round $r this:"; run "$tmp/new" bench scale --members-floor
done
