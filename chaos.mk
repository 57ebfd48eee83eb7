# Reliability targets. Include from the Makefile (`include chaos.mk`)
# or run directly: make -f chaos.mk chaos-smoke
#
#   chaos        long fault-injection run (CHAOS_DURATION of faults, default 5m)
#   chaos-goal   the issue's goal: >=50 faults of each kind, >=1M records, >=100k jobs
#                (the network's latency, blackholes and cuts at a COMMIT or a
#                reply, pg_terminate_backend, PgBouncer killed, a full disk:
#                20 kinds), then chaos-failover
#   chaos-failover  >= CHAOS_FAILOVER_FAULTS_PER_KIND (20) primary kills and
#                switchovers of a pg_auto_failover formation under the same agents
#   chaos-smoke  the bounded runs (~1 min of every kind, ~15 s of each network
#                kind, two disk-full faults, one failover and one switchover,
#                the kinds enqueuer's backlog bound) that `go test ./...` also runs
#   soak         SOAK_DURATION (default 10m) at 70% of the measured max rate
#   soak-smoke   the 1-minute soak
#   fuzz-smoke   every fuzz target for FUZZTIME (default 10s) each
#
# Every run starts its own PostgreSQL from the machine's binaries (as root
# it runs as user postgres). See docs/reliability.md for the figures.

GO ?= go
CHAOS_DURATION ?= 5m
CHAOS_RATE ?= 300
# The issue's goal: keep injecting until every kind was injected this often.
CHAOS_FAULTS_PER_KIND ?= 0
CHAOS_FAULT_MIN ?= 2s
CHAOS_FAULT_MAX ?= 5s
CHAOS_ENQUEUERS ?= 1
# Only these kinds (a comma list, e.g. disk_full), when set.
CHAOS_FAULTS ?=
CHAOS_FAILOVER_FAULTS_PER_KIND ?= 20
SOAK_DURATION ?= 10m
FUZZTIME ?= 10s
# FuzzRequest runs ~35 requests against a server per input (a few execs a
# second), FuzzHTTPProperty up to 16 and its checks; they get their own budget.
FUZZTIME_REQUEST ?= $(FUZZTIME)
# Fuzz targets that need a database take a few seconds to start one per
# fuzz worker; one worker keeps that cost (and the load) down.
FUZZ_PARALLEL ?= 1

FUZZ_ROOT := FuzzValidateName FuzzPosition FuzzIsRetryable FuzzMatchPattern
FUZZ_STORE := FuzzHeaders
FUZZ_HTTP := FuzzParseDuration FuzzDecodeValue FuzzRequest FuzzAuthorization FuzzHTTPProperty

.PHONY: chaos chaos-goal chaos-failover chaos-smoke soak soak-smoke fuzz-smoke

chaos:
	PGMSG_CHAOS_DURATION=$(CHAOS_DURATION) PGMSG_CHAOS_RATE=$(CHAOS_RATE) \
	PGMSG_CHAOS_FAULTS_PER_KIND=$(CHAOS_FAULTS_PER_KIND) PGMSG_CHAOS_ENQUEUERS=$(CHAOS_ENQUEUERS) \
	PGMSG_CHAOS_FAULT_MIN=$(CHAOS_FAULT_MIN) PGMSG_CHAOS_FAULT_MAX=$(CHAOS_FAULT_MAX) \
	PGMSG_CHAOS_FAULTS=$(CHAOS_FAULTS) \
		$(GO) test -count=1 -timeout 240m -run 'TestChaosLong' -v ./test/chaos

# Primary kills and clean switchovers of a pg_auto_failover formation
# (synchronous replication), each at least CHAOS_FAILOVER_FAULTS_PER_KIND
# times, under producers, groups, workers and the maintenance leader on
# the formation's multi-host URL. Fails without pg_autoctl.
chaos-failover:
	PGMSG_REQUIRE_FAILOVER=1 PGMSG_CHAOS_FAILOVER_FAULTS_PER_KIND=$(CHAOS_FAILOVER_FAULTS_PER_KIND) \
	PGMSG_CHAOS_RATE=$(CHAOS_RATE) \
		$(GO) test -count=1 -timeout 300m -run 'TestChaosFailoverLong' -v ./test/chaos

# The issue's goal: at least 50 faults of every kind, 1M records and 100k
# jobs in one run (1h17m here with 18 kinds), then at least 20 of each
# failover kind against a pg_auto_failover formation (chaos-failover).
chaos-goal:
	@command -v pgbouncer >/dev/null || { echo "chaos-goal: pgbouncer is not installed (apt-get install pgbouncer); without it the PgBouncer kind would not be injected and the goal would not be met"; exit 1; }
	@[ "$$(id -u)" = 0 ] || { echo "chaos-goal: the disk-full kind mounts a tmpfs: run as root"; exit 1; }
	$(MAKE) -f $(firstword $(MAKEFILE_LIST)) chaos CHAOS_DURATION=30m CHAOS_FAULTS_PER_KIND=50 \
		CHAOS_FAULT_MIN=1500ms CHAOS_FAULT_MAX=3s CHAOS_RATE=250 CHAOS_ENQUEUERS=2
	$(MAKE) -f $(firstword $(MAKEFILE_LIST)) chaos-failover CHAOS_RATE=200

chaos-smoke:
	PGMSG_CHAOS_FAILOVER=1 $(GO) test -count=1 -timeout 30m -run 'TestChaosSmoke|TestChaosNetwork|TestChaosDiskFull|TestChaosFailover$$|TestChaosKindsBacklog|TestChecker|TestOptionsCheck' -v ./test/chaos

soak:
	PGMSG_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -timeout 60m -run 'TestSoak' -v ./test/chaos

soak-smoke:
	PGMSG_SOAK_DURATION=1m $(GO) test -count=1 -timeout 20m -run 'TestSoak' -v ./test/chaos

fuzz-smoke:
	@set -e; for t in $(FUZZ_ROOT); do \
		echo "fuzz $$t ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZ_PARALLEL) . ; \
	done; \
	for t in $(FUZZ_STORE); do \
		echo "fuzz $$t ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZ_PARALLEL) ./internal/store ; \
	done; \
	for t in $(FUZZ_HTTP); do \
		ft=$(FUZZTIME); case $$t in FuzzRequest|FuzzHTTPProperty) ft=$(FUZZTIME_REQUEST);; esac; \
		echo "fuzz $$t ($$ft)"; \
		$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $$ft -parallel $(FUZZ_PARALLEL) ./internal/httpapi ; \
	done
