#!/bin/bash
# Where the time of 64 single-record callers goes (issue 55): one run of
# single-record-sweep.sh's pgmsg configuration (64 ProduceSync callers,
# one shared Producer, 4 partitions) with pg_stat_statements reset before
# it, perf recording the cluster's processes and the bench for 5 s of the
# measured window, and a Go CPU profile of the bench. Prints the run's
# summary, the statements by server time and the share of the samples by
# what they were doing (COPY, the direct statement, the commit's flush,
# the other statements, the client's publish, notifications ...).
# Needs perf, pg_stat_statements in shared_preload_libraries (the script
# creates the extension), and the cluster's data directory (PGDATA: its
# postmaster.pid names the processes to record). Usage, from the
# repository root:
#   go build -o /tmp/pgmsg ./cmd/pgmsg
#   URL=postgres://... PGDATA=/path/to/data bash bench/scripts/single-record-profile.sh [out-dir]
set -u
URL=${URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
PGMSG=${PGMSG:-/tmp/pgmsg}
OUT=${1:-/tmp/single-record-profile}
: "${PGDATA:?set PGDATA to the data directory of the cluster}"
mkdir -p "$OUT"
psql "$URL" -qc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' -c 'SELECT pg_stat_statements_reset()' >/dev/null
$PGMSG --database-url "$URL" --schema pgmsg_bench bench pubsub --force --batch 1 --partitions 4 --groups 0 \
  --duration 8s --warmup 3s --producers 64 --cpuprofile "$OUT/bench.pprof" >"$OUT/bench.out" 2>&1 &
BP=$!
sleep 5
PIDS=$( (pgrep -P "$(head -1 "$PGDATA/postmaster.pid")"; echo $BP) | paste -sd,)
perf record -F 1999 -g -p "$PIDS" -o "$OUT/perf.data" -- sleep 5 >/dev/null 2>&1
wait $BP
grep -E '^(writes_per_sec|publish_p99_ms|process_cpu_per_record_us|pg_cpu_per_record_us)' "$OUT/bench.out"
psql "$URL" -c "SELECT calls, round(total_exec_time::numeric, 1) AS total_ms, round(mean_exec_time::numeric, 3) AS mean_ms,
  rows, wal_records, left(regexp_replace(query, '\s+', ' ', 'g'), 70) AS query
  FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12"
# Each sample goes to the first category its stack matches.
perf script -i "$OUT/perf.data" -F comm,ip,sym 2>/dev/null | awk '
  function flush() {
    if (comm == "") return
    if (comm != "postgres") k = (s ~ /NotifyTopics/) ? "client: notifications" : (s ~ /publishCopy/) ? "client: COPY publish" :
                               (s ~ /PublishDirect/) ? "client: direct publish" : "client: the rest"
    else if (s ~ /pg_notify|PreCommit_Notify/) k = "server: notifications"
    else if (s ~ /DoCopy/) k = "server: COPY"
    else if (s ~ /fmgr_security_definer|plpgsql/) k = "server: _publish_direct()"
    else if (s ~ /XLogFlush/) k = "server: commit, WAL flush"
    else if (s ~ /CommitTransactionCommand/) k = "server: commit, the rest"
    else if (s ~ /PortalRun|PortalStart/) k = "server: other statements"
    else if (s ~ /PostgresMain/) k = "server: protocol, parse, bind"
    else k = "server: background processes"
    n[k]++; total++
  }
  /^[^ \t]/ { flush(); comm = $1; s = ""; next }
  { s = s " " $2 }
  END { flush(); for (k in n) printf "%5.1f%%  %s\n", 100 * n[k] / total, k | "sort -rn" }'
