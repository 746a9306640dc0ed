# postgrescopy: `make run` and `make test` are the two set-up commands.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/.bin
OCB_VERSION := v0.165.0
TELEMETRYGEN_VERSION := v0.161.0
OCB := $(BIN)/builder
TELEMETRYGEN := $(BIN)/telemetrygen
# Jaeger, for the end-to-end test of the jaeger_remote_storage extension:
# built from tools/jaeger, a module of its own (Jaeger's Collector modules
# are older than the distribution's; they stay out of go.mod).
JAEGER := $(BIN)/jaeger
NFPM_VERSION := v2.48.0
NFPM := $(BIN)/nfpm
COLLECTOR := $(CURDIR)/_build/otelcol-postgrescopy
# The version the distribution is built as (scripts/version.sh: X.Y.Z at a
# release tag, X.Y.Z+N.gSHA after it); --version and service.version show it.
ifeq ($(origin DIST_VERSION),undefined)
DIST_VERSION := $(shell scripts/version.sh)
endif
DIST_VERSION_STAMP := $(CURDIR)/_build/.dist-version
GO_SOURCES := $(shell find . -name '*.go' -not -path './_build/*') $(shell find . -name '*.sql' -not -path './_build/*') go.mod go.sum

export POSTGRESCOPY_COLLECTOR := $(COLLECTOR)
export POSTGRESCOPY_TELEMETRYGEN := $(TELEMETRYGEN)
export POSTGRESCOPY_VERSION := $(DIST_VERSION)
export POSTGRESCOPY_OCB := $(OCB)
export POSTGRESCOPY_JAEGER := $(JAEGER)
# What scripts/services.sh starts keeps its data and pid files here; it writes
# the addresses it settled on to services.env, which recipes source.
DATA := $(CURDIR)/.data
export POSTGRESCOPY_DATA := $(DATA)
SERVICES_ENV = set -a; . $(DATA)/services.env; set +a

.PHONY: all tools build run test unit lint deps services stop clean bench soak fuzz
.PHONY: release package package-test distcheck FORCE

all: build

$(OCB):
	GOBIN=$(BIN) $(GO) install go.opentelemetry.io/collector/cmd/builder@$(OCB_VERSION)

$(TELEMETRYGEN):
	GOBIN=$(BIN) $(GO) install github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@$(TELEMETRYGEN_VERSION)

$(JAEGER): tools/jaeger/go.mod tools/jaeger/go.sum
	@mkdir -p $(BIN)
	cd tools/jaeger && $(GO) build -o $(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger

tools: $(OCB) $(TELEMETRYGEN) $(JAEGER)

# The distribution: ocb generates _build/ and compiles it. ocb reads its
# environment over the manifest (koanf), so dist.version comes from here; the
# stamp rebuilds the binary when the version changes.
$(COLLECTOR): $(OCB) builder-config.yaml $(GO_SOURCES) $(DIST_VERSION_STAMP)
	env 'dist.version=$(DIST_VERSION)' $(OCB) --config builder-config.yaml

FORCE:

$(DIST_VERSION_STAMP): FORCE
	@mkdir -p $(@D); [ "$$(cat $@ 2>/dev/null)" = "$(DIST_VERSION)" ] || echo "$(DIST_VERSION)" >$@

build: $(COLLECTOR)

# Debian packages the project needs (PostgreSQL server and psql, Redis,
# PgBouncer): installs the missing ones, as root, in one apt-get run.
deps:
	@scripts/deps.sh

# PostgreSQL and Redis answering, started when needed; `make stop` stops
# what was started here and nothing else.
services: deps
	@scripts/services.sh

stop:
	@scripts/services.sh stop

run: build services $(TELEMETRYGEN)
	@$(SERVICES_ENV); p=; [ "$$PGPORT" = 5432 ] || p=" -p $$PGPORT"; \
	echo; \
	echo "otelcol-postgrescopy: OTLP gRPC on 127.0.0.1:4317, HTTP on 127.0.0.1:4318, batches through Redis $$POSTGRESCOPY_REDIS, writing to schema otel of PostgreSQL on 127.0.0.1:$$PGPORT."; \
	echo "  send:  .bin/telemetrygen traces --otlp-insecure --otlp-endpoint 127.0.0.1:4317 --traces 100 --child-spans 3 --rate 100"; \
	echo "  query: psql -h 127.0.0.1$$p -U postgres -c 'SELECT service_name, span_name, duration_ns FROM otel.spans ORDER BY start_time DESC LIMIT 10'"; \
	echo "  stop:  Ctrl-C stops the collector; make stop stops the PostgreSQL and Redis make started"; \
	echo; \
	exec $(COLLECTOR) --config config.yaml

# Unit, integration (real PostgreSQL) and end-to-end (built collector driven
# by telemetrygen) tests. Where the citus extension is installed, the Citus
# tests run against a cluster of their own (scripts/citus.sh: a coordinator
# and two workers under .data/citus), stopped at the end whatever the
# outcome; without it they skip and say why.
test: services build $(TELEMETRYGEN) $(JAEGER) lint
	@$(SERVICES_ENV); trap 'scripts/citus.sh stop' EXIT; scripts/citus.sh start || exit 1; \
	  set -a; . $(DATA)/citus.env; set +a; set -x; $(GO) test -count=1 -timeout 20m ./...

# The same Citus cluster for running its tests by hand: go test with the
# POSTGRESCOPY_CITUS_URL of .data/citus.env; scripts/citus.sh stop stops it.
.PHONY: citus
citus:
	@scripts/citus.sh start

unit:
	$(GO) test -count=1 -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './_build/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 ./internal/docscheck/ ./cmd/benchchart/

# Failure soak, kept out of `make test` (about 12 minutes): the built collector
# under OTLP load through each scenario, every acknowledged item then checked
# in PostgreSQL exactly once, one table at the end (exit 1 on any failure):
# kill (SIGKILLs of the collector, Redis mode), redis-empty (Redis without
# persistence SIGKILLed and restarted empty: only what it held may be lost,
# and reported), redis-aof, pg-outage (PostgreSQL down 320s, direct and
# Redis), collector-kill-outage (file_storage queue), stop-outage (SIGTERM
# during an outage: PostgreSQL stopped or every write locked) and identical (five
# identical requests). Throwaway redis-server and PostgreSQL servers on free
# ports; the local ones are never stopped. One scenario, other settings:
# make soak SOAK_FLAGS='-scenarios kill -kills 8 -seed 42' (go run ./cmd/soak -h).
SOAK_FLAGS ?=
soak: build services
	$(GO) run ./cmd/soak -collector $(COLLECTOR) $(SOAK_FLAGS)

# Fuzzing, kept out of `make test`: each target runs for FUZZTIME from its seed
# corpus in the package's testdata/fuzz/; a crash is written there too, and
# then fails `go test` until fixed (keep it: it is the regression test).
FUZZTIME ?= 20s
FUZZ_TARGETS := ./internal/rows:FuzzAddTraces ./internal/rows:FuzzAddLogs ./internal/rows:FuzzAddMetrics \
	./internal/jsonb:FuzzAppendString ./internal/jsonb:FuzzAppendValue ./internal/jsonb:FuzzTruncate
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "== $${t#*:} ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) $${t%%:*}; \
	done

# The write strategies on this machine, against the raw psql \copy
# ceiling (docs/benchmarks.md): write strategies at growing scale, writes while
# queries/ run, and the indexes. About 20 minutes on 2 cores with the
# defaults; results go to bench/results/. Bigger machines reach the article's
# scale with e.g. make bench SCALE=100,500,1000 USERS=500; PARTS picks parts,
# BENCH_FLAGS passes any other flag of cmd/bench (-runs, -strategies...). It
# ends with the Targets section and fails (status 3) when postgrescopy + Redis
# is behind plain COPY at any scale or rows were lost.
SCALE ?= 10,50,100
USERS ?= 10
PARTS ?= ceiling,strategies,mixed,indexes
BENCH_FLAGS ?=
bench: build services
	@$(SERVICES_ENV); set -x; $(GO) run ./cmd/bench -scale $(SCALE) -users $(USERS) -parts $(PARTS) -collector $(COLLECTOR) -redis "$$POSTGRESCOPY_REDIS" $(BENCH_FLAGS)

# A release: checks that the tree is clean, that CHANGELOG.md has the version
# and builder-config.yaml's dist.version is it, and that `make test` passes,
# then tags HEAD vX.Y.Z (a local annotated tag; pushing it is up to you).
# RELEASE_TEST overrides the test command.
VERSION ?=
RELEASE_TEST ?= $(MAKE) test
release:
	@RELEASE_TEST='$(RELEASE_TEST)' scripts/release.sh '$(VERSION)'

$(NFPM):
	GOBIN=$(BIN) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

# Packages of the built distribution in dist/: .deb, .rpm and a .tar.gz of
# the binary, version DIST_VERSION, package release PKG_RELEASE, and
# dist/sha256sums.txt over every artifact there (packaging/, docs/install.md).
PKG_RELEASE ?= 1
package: build $(NFPM)
	@NFPM=$(NFPM) scripts/package.sh $(COLLECTOR) '$(DIST_VERSION)' '$(PKG_RELEASE)' $(CURDIR)/dist

# The .deb on a fresh Debian bookworm root (debootstrap, as root; minutes):
# installed, run as its unit runs it, spans sent and found in PostgreSQL,
# upgraded with an edited config kept, removed. Not part of `make test`.
package-test: build $(NFPM) $(TELEMETRYGEN) services
	@$(SERVICES_ENV); DIST_VERSION='$(DIST_VERSION)' NFPM=$(NFPM) OCB=$(OCB) TELEMETRYGEN=$(TELEMETRYGEN) scripts/package-test.sh

# postgrescopy in a user's own distribution, alone (`make test` runs it too):
# docs/install.md's manifest (otlp, batch, filelog, file_storage, debug,
# postgrescopy, loadgen) built with ocb in a temporary directory outside the
# repository, run, its rows found in PostgreSQL. Its build shares the Go
# build cache: seconds warm, minutes the first time on a machine.
distcheck: services $(OCB) $(TELEMETRYGEN)
	@$(SERVICES_ENV); set -x; $(GO) test -count=1 -timeout 30m -run 'TestOwnDistribution' -v ./e2e/

clean:
	rm -rf _build dist
