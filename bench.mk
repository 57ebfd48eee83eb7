# Benchmarks. Included from the Makefile.
#
# Every figure in docs/benchmarks.md comes from `make bench-docs`, which
# writes one JSON summary per scenario into docs/benchmarks/ and redraws
# docs/benchmarks/chart.svg from them. Each scenario runs pgmsg and its
# baselines side by side, alternating, BENCH_ROUNDS times, and reports
# medians. Without BENCH_DATABASE_URL each scenario starts its own
# throwaway PostgreSQL (default settings) from the machine's binaries.

BENCH_DATABASE_URL ?=
BENCH_ROUNDS ?= 3
BENCH_DURATION ?= 10s
BENCH_OUT ?= docs/benchmarks
BENCH_PGMSG = $(GO) run ./cmd/pgmsg $(if $(BENCH_DATABASE_URL),--database-url '$(BENCH_DATABASE_URL)') --schema pgmsg_bench bench
BENCH_PEERS = cd bench/peers && $(GO) run . $(if $(BENCH_DATABASE_URL),--database-url '$(BENCH_DATABASE_URL)') --schema pgmsg_bench
BENCH_COMMON = --duration $(BENCH_DURATION) --rounds $(BENCH_ROUNDS) --json

.PHONY: bench-scale bench-fanout bench-smoke bench-go bench-docs bench-chart bench-pubsub bench-queue bench-kafka bench-peers-tidy

# A few seconds of each mode, with the seed baseline and River, failing on
# any error or on a run that measured nothing. CI runs it.
bench-smoke:
	$(GO) run ./cmd/pgmsg --schema pgmsg_bench_smoke bench pubsub --duration 2s --warmup 500ms \
		--producers 4 --batch 10 --groups 2 --claim-batch 100 --baseline seed --strict
	$(GO) run ./cmd/pgmsg --schema pgmsg_bench_smoke bench pubsub --duration 2s --warmup 500ms \
		--producers 8 --batch 1 --baseline seed --strict
	$(GO) run ./cmd/pgmsg --schema pgmsg_bench_smoke bench pubsub --impl kafka --duration 2s --warmup 1s \
		--producers 4 --batch 10 --groups 2 --rate 2000 --strict
	$(GO) run ./cmd/pgmsg --schema pgmsg_bench_smoke bench queue --duration 2s --warmup 0s \
		--workers 4 --jobs 20000 --baseline seed --strict
	cd bench/peers && $(GO) run . --schema pgmsg_bench_smoke --impl river --duration 2s --warmup 0s \
		--workers 100 --jobs 20000 --strict
	$(GO) test -run '^$$' -bench . -benchtime 3x .

# Many topics: 500 topics x 4 partitions, the listings, /metrics, a
# maintenance pass, idle CPU and 1,000 heartbeating members (a few minutes;
# not in bench-smoke). docs/benchmarks.md, "Many topics".
bench-scale:
	$(GO) run ./cmd/pgmsg $(if $(BENCH_DATABASE_URL),--database-url '$(BENCH_DATABASE_URL)') --schema pgmsg_scale bench scale \
		--topics 500 --partitions 4 --members 1000 --idle 30s

# Many groups: one topic at 1,000 records/s read by 5, then 1,000 groups
# (a few minutes; not in bench-smoke). docs/benchmarks.md, "Many groups".
bench-fanout:
	$(GO) run ./cmd/pgmsg $(if $(BENCH_DATABASE_URL),--database-url '$(BENCH_DATABASE_URL)') bench fanout \
		--groups 5,1000 --rate 1000

# The Go benchmarks of the hot paths (publish, producer, claim+commit).
bench-go:
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 .

bench-pubsub:
	@mkdir -p $(BENCH_OUT)
	# Single-record publishes from 64 concurrent callers (the batching Producer).
	$(BENCH_PGMSG) pubsub $(BENCH_COMMON) --producers 64 --batch 1 --partitions 4 --baseline seed > $(BENCH_OUT)/pubsub-batch1.json
	$(BENCH_PGMSG) pubsub $(BENCH_COMMON) --producers 8 --batch 100 --partitions 4 --baseline seed > $(BENCH_OUT)/pubsub-batch100.json
	# Bulk publish against the seed baseline's SQL (internal/bench/seed_sql.go) and raw COPY into a bare table.
	$(BENCH_PGMSG) pubsub $(BENCH_COMMON) --producers 8 --batch 1000 --partitions 4 --baseline seed,copy > $(BENCH_OUT)/pubsub-batch1000.json
	# Mixed: 4 producers x batch 100, 5 groups reading, unthrottled.
	$(BENCH_PGMSG) pubsub $(BENCH_COMMON) --producers 4 --batch 100 --partitions 4 --groups 5 --claim-batch 1000 --baseline seed > $(BENCH_OUT)/pubsub-mixed.json
	# Mixed, writes throttled to 5,000/s.
	$(BENCH_PGMSG) pubsub $(BENCH_COMMON) --producers 4 --batch 10 --partitions 4 --groups 5 --claim-batch 1000 --rate 5000 --baseline seed > $(BENCH_OUT)/pubsub-mixed-5k.json
	# Consume only: 5 groups read a prefilled topic.
	$(BENCH_PGMSG) pubsub $(BENCH_COMMON) --producers 0 --prefill 400000 --partitions 4 --groups 5 --claim-batch 1000 --baseline seed > $(BENCH_OUT)/pubsub-consume.json

bench-queue:
	@mkdir -p $(BENCH_OUT)
	# 16 workers: the seed baseline's SQL (internal/bench/seed_sql.go) at its best worker count, River and pgmsg alike.
	$(BENCH_PEERS) $(BENCH_COMMON) --impl pgmsg --baseline seed,river --workers 16 --jobs 150000 > $(abspath $(BENCH_OUT))/queue-16.json
	# Latency: an empty queue fed 100 jobs/s during the run (e2e = enqueue to completion; River at 16 workers tops out near 160 jobs/s).
	$(BENCH_PEERS) $(BENCH_COMMON) --impl pgmsg --baseline seed,river --workers 16 --jobs 0 --rate 100 > $(abspath $(BENCH_OUT))/queue-latency.json
	# 2000 workers: River's own benchmark setting (the seed baseline's SQL (internal/bench/seed_sql.go) needs one connection per worker, so it cannot run here).
	$(BENCH_PEERS) $(BENCH_COMMON) --impl pgmsg --baseline river --workers 2000 --jobs 200000 > $(abspath $(BENCH_OUT))/queue-2000.json

# The Kafka listener against the native API, alternated in each scenario
# (docs/benchmarks.md, "Kafka listener"): franz-go clients (acks=all,
# idempotent, linger 5 ms) through an in-process listener vs Client.Publish
# and Consumer.Run on the same settings (both groups' sessions 45 s,
# franz-go's default).
BENCH_KAFKA_ROUNDS ?= 5
BENCH_KAFKA = $(BENCH_PGMSG) pubsub --impl kafka --baseline pgmsg --duration $(BENCH_DURATION) --rounds $(BENCH_KAFKA_ROUNDS) --json --pgmsg-session-timeout 45s
bench-kafka:
	@mkdir -p $(BENCH_OUT)
	# Produce only: 8 producers, batches of 100 1 KiB records, 4 partitions.
	$(BENCH_KAFKA) --producers 8 --batch 100 --partitions 4 > $(BENCH_OUT)/kafka-produce.json
	# Consume only: 5 groups read a prefilled topic (Fetch vs Consumer.Run).
	$(BENCH_KAFKA) --producers 0 --prefill 200000 --partitions 4 --groups 5 --claim-batch 1000 > $(BENCH_OUT)/kafka-consume.json
	# Mixed, writes throttled to 5,000/s: end-to-end latency.
	$(BENCH_KAFKA) --producers 4 --batch 10 --partitions 4 --groups 5 --claim-batch 1000 --rate 5000 > $(BENCH_OUT)/kafka-mixed-5k.json

bench-chart:
	$(GO) run ./internal/bench/chart -o $(BENCH_OUT)/chart.svg $(filter-out $(BENCH_OUT)/kafka-%.json,$(wildcard $(BENCH_OUT)/*.json))

bench-docs: bench-pubsub bench-queue bench-chart

# bench/peers pins River; after pgmsg's own dependencies change, refresh its go.sum.
bench-peers-tidy:
	cd bench/peers && $(GO) mod tidy
