# gpulens — build, test and demo targets. See README.md.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1
# go-nvml's C headers mark many calls deprecated; silence the noise.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations

BIN := bin
SCRATCH := .scratch
# The pinned tools (the Prometheus server, promtool, helm, golangci-lint)
# live in their own module, tools/go.mod, so go.mod lists only what the
# product imports. Run one
# from the repository root as `go tool -modfile=tools/go.mod NAME ARGS`, e.g.
# `go tool -modfile=tools/go.mod promtool check rules alerts/*.rules.yml`;
# tidy it with `cd tools && go mod tidy` (check-mod checks both modules).
TOOLS_MODFILE := tools/go.mod
# What --version reports (prometheus/common/version), from git: VERSION is
# the tag vX.Y.Z as X.Y.Z on a tagged commit, else git describe's
# X.Y.Z-N-gHASH past a tag, or the short commit without tags, -dirty with
# uncommitted changes ("dev" outside git); BUILD_DATE is the commit's date,
# not the clock's, so two builds of one commit are the same bytes. Each can
# be given: make build VERSION=0.1.0. Released versions: CHANGELOG.md;
# make release.
VERSION ?= $(or $(shell git describe --tags --always --dirty 2>/dev/null | sed 's/^v\([0-9]\)/\1/'),dev)
REVISION ?= $(or $(shell git rev-parse HEAD 2>/dev/null),unknown)
BUILD_DATE ?= $(or $(shell git log -1 --format=%cI 2>/dev/null),unknown)
# Each computed once, not at every use.
VERSION := $(VERSION)
REVISION := $(REVISION)
BUILD_DATE := $(BUILD_DATE)
LDFLAGS := -X github.com/prometheus/common/version.Version=$(VERSION) \
           -X github.com/prometheus/common/version.Revision=$(REVISION) \
           -X github.com/prometheus/common/version.Branch=main \
           -X github.com/prometheus/common/version.BuildDate=$(BUILD_DATE)

# Demo ports and settings (see scripts/demo.sh).
export DEMO_EXPORTER_ADDR ?= 127.0.0.1:9842
export DEMO_SIM_ADDR ?= 127.0.0.1:8000
export DEMO_LOADGEN_ADDR ?= 127.0.0.1:9843
export DEMO_PROMETHEUS_ADDR ?= 127.0.0.1:9090
export DEMO_SCENARIO ?= demo
export DEMO_CONCURRENCY ?= 16
export DEMO_GPU_HOURLY_USD ?=

# Every go test has an explicit -timeout above the test harness's longest
# limit (internal/testenv builds a tool for up to 15 minutes).
TEST_TIMEOUT ?= 25m

.PHONY: all build release images print-version tools tools-cache test check vet unit unit-race unit-norace scenario-alerts alerts-test-bin race-deps ensure-chromium check-mod check-metrics check-rules dashboards generate demo bench gpu-smoke check-ptx fmt clean real-gpu-validate real-gpu-validate-sim probe-tenant-cost fleet-bench thanos test-thanos lint

all: build

# The binaries, and the pinned Prometheus server from tools/go.mod (for the
# demo and the end-to-end tests).
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...
	$(GO) build -modfile=$(TOOLS_MODFILE) -o $(BIN)/prometheus github.com/prometheus/prometheus/cmd/prometheus

# The release (docs: README.md#releases): gpulens-exporter, gpulens-loadgen
# and gpulens-verify for RELEASE_PLATFORMS, each in a tar.gz with LICENSE,
# README.md and CHANGELOG.md, and SHA256SUMS, in dist/VERSION/; a tagged
# version X.Y.Z must match the CHANGELOG's latest version, the Helm chart's
# version and appVersion and the kustomize image tags, and adds the packaged
# chart. The exporter and verify use cgo (go-nvml): another architecture
# needs a C cross compiler (CC_<os>_<arch>, e.g. CC_linux_arm64, default
# aarch64-linux-gnu-gcc); the script says which is missing and how to get it.
# Prints the docker build commands of the images (make images runs them).
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
DIST ?= dist
release:
	@VERSION='$(VERSION)' REVISION='$(REVISION)' BUILD_DATE='$(BUILD_DATE)' LDFLAGS='$(LDFLAGS)' \
		bash scripts/release.sh '$(DIST)' '$(RELEASE_PLATFORMS)'

# The container images of deploy/docker, tagged VERSION; needs a Docker
# engine and says so without one.
images:
	@VERSION='$(VERSION)' REVISION='$(REVISION)' BUILD_DATE='$(BUILD_DATE)' \
		bash scripts/release.sh --images

# VERSION, REVISION, BUILD_DATE and LDFLAGS as the build uses them (a test
# checks that --version reports what LDFLAGS sets).
print-version:
	@printf 'VERSION=%s\nREVISION=%s\nBUILD_DATE=%s\nLDFLAGS=%s\n' '$(VERSION)' '$(REVISION)' '$(BUILD_DATE)' '$(strip $(LDFLAGS))'

# The pinned tools as binaries in bin/ (prometheus, promtool, helm,
# golangci-lint), e.g. to
# copy to a machine without Go (scripts/gpu-smoke.sh's PROMTOOL).
tools:
	$(GO) build -modfile=$(TOOLS_MODFILE) -o $(BIN)/ tool

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# Targets that run bin/ build it first, except when make test starts them
# side by side after building once (scripts/test.sh passes BUILT=1: two
# go builds writing bin/ while a test runs it would race).
BUILD_FIRST := $(if $(BUILT),,build)

# Every package's tests, in two go test runs (`make unit` runs both):
#
# unit-race: with the race detector, every package whose tests run gpulens
# code on more than one goroutine in the test process (the exporter's
# sampler, the load generator, the simulated fleet and server, the probe,
# testenv).
#
# unit-norace: the packages of RACE_FREE, without it. Their tests check the
# rules, dashboards and deploy files: they run our programs as separate
# processes (bin/, built without -race, as users run them), the pinned
# Prometheus, promtool and helm, and in-process only Prometheus's own
# libraries (the PromQL engine, rulefmt, teststorage) and gpulens code on the
# test's goroutine (gpusim on a fake clock, collector descriptions, the
# dashboard builders, promcheck's parser), code whose concurrency the race
# run above tests in its own packages. So -race there would watch only
# the tests' own goroutine and libraries we do not own, at a price: a second,
# instrumented compile of the ~690 packages only these tests import
# (Prometheus's engine and storage, Kubernetes' API types, compose-go,
# helm's chart code), and the PromQL engine several times slower
# (dashboards: 51 s with -race, 6 s without). docs/benchmarks.md#test-loop
# has the numbers. A package whose tests start gpulens code on goroutines
# of their own belongs in unit-race.
#
# Both scrape the built binaries (GPULENS_BIN) instead of building their
# own. The HTML report is checked in headless Chromium (Debian's package,
# installed when missing).
RACE_FREE := ./alerts/... ./dashboards/... ./deploy/...
# A shell command listing every package of the module but those of RACE_FREE.
RACE_PKGS = $(GO) list ./... | grep -vxF -f <($(GO) list $(RACE_FREE))
unit: unit-race unit-norace scenario-alerts

unit-race: $(BUILD_FIRST) ensure-chromium
	GPULENS_BIN=$(abspath $(BIN)) GPULENS_REQUIRE_CHROMIUM=1 $(GO) test -race -count=1 -timeout=$(TEST_TIMEOUT) $$($(RACE_PKGS))

# Compiles with -race every package unit-race's tests import (no test binary,
# no program: nothing to link), so that make test's parts start with it
# compiled: from a cold cache that is minutes of both cores, which would
# otherwise compete with the tests running Prometheus in real time.
race-deps:
	@$(GO) build -race $$($(GO) list -deps -test -f '{{if ne .Name "main"}}{{.ImportPath}}{{end}}' $$($(RACE_PKGS)) | \
		grep -v -e ' \[' -e '\.test$$')

unit-norace: $(BUILD_FIRST)
	GPULENS_BIN=$(abspath $(BIN)) $(GO) test -count=1 -timeout=$(TEST_TIMEOUT) -skip '^($(SCENARIO_TEST))$$' $(RACE_FREE)

# scenario-alerts: alerts' TestScenarioAlerts alone (unit-norace skips it),
# every built-in scenario's exporter running 60 simulated minutes at 40x in
# about 100 s of wall clock, scraped, then the shipped rules evaluated by
# Prometheus's rule engine over what was scraped: the one test of
# make test that keeps a real-time pace (a second's stall is 40 simulated
# seconds), so make test runs it as a part of its own at normal priority
# while every other part runs at nice 10 (TEST_NICE), and builds its test
# binary in the serial phase (alerts-test-bin: the Prometheus libraries the
# alerts tests import, compiled once, before the parts start, not by two
# parts at once while the scenarios run).
SCENARIO_TEST := TestScenarioAlerts
ALERTS_TEST_BIN := $(SCRATCH)/alerts.test
alerts-test-bin:
	@mkdir -p $(SCRATCH)
	$(GO) test -c -o $(ALERTS_TEST_BIN) ./alerts

scenario-alerts: $(BUILD_FIRST) $(if $(BUILT),,alerts-test-bin)
	cd alerts && GPULENS_BIN=$(abspath $(BIN)) $(abspath $(ALERTS_TEST_BIN)) -test.count=1 -test.timeout=$(TEST_TIMEOUT) -test.v -test.run '^($(SCENARIO_TEST))$$'

# The inner loop: gofmt and vet, the lint, then every test that needs no
# real Prometheus, promtool, Chromium or build of a tool (-short skips
# those). Warm, about 80 s on two busy cores; 10 s when nothing changed
# (docs/benchmarks.md#test-loop).
check: vet lint
	$(GO) test -short -timeout=$(TEST_TIMEOUT) ./...

# golangci-lint, pinned in tools/go.mod, with the linters .golangci.yml
# chooses and says why; its cache (the analyses of unchanged packages)
# in LINT_CACHE, made here. Every finding fails; docs/benchmarks.md has
# its cold and warm times.
LINT_CACHE ?= $(abspath $(SCRATCH))/golangci-lint
lint:
	@mkdir -p '$(LINT_CACHE)'
	GOLANGCI_LINT_CACHE='$(LINT_CACHE)' $(GO) tool -modfile=$(TOOLS_MODFILE) golangci-lint run ./...

ensure-chromium:
	@bash scripts/ensure-chromium.sh

# go mod tidy leaves go.mod/go.sum and tools/go.mod/go.sum unchanged, and the
# modules both use are at the same version in both (one build cache).
check-mod:
	@bash scripts/check-mod.sh

# Lints a live scrape of the simulated exporter with the pinned promtool.
check-metrics: $(BUILD_FIRST)
	@bash scripts/check-metrics.sh $(BIN)

# promtool check rules + promtool test rules on alerts/, the tests
# RULE_TEST_RUNS times (default 3) to catch a rule-order dependence.
check-rules:
	@bash scripts/check-rules.sh

# Regenerates dashboards/*.json from the Go code in dashboards/, and the
# deploy/ copies of dashboards and rules.
dashboards:
	$(GO) run ./dashboards/gen -out dashboards
	$(MAKE) generate

# Regenerates deploy/ objects made from alerts/ and dashboards/
# (PrometheusRule, Grafana dashboard ConfigMaps).
generate:
	$(GO) run ./deploy/gen

# Every check, in two phases (scripts/test.sh): first, one at a time, what
# compiles (build, the pinned promtool and helm into the build cache, vet,
# race-deps: two go commands compiling the same package at once would each
# compile it) and check-mod; then the rest side by side, each into its own log under
# .scratch/test/, reported as each ends (a failing part's log in full) and
# named again in the last line. Most of them wait on processes and wall
# clock, so running them together fills the two cores instead of leaving
# one idle. TEST_PARTS selects the second phase's parts.
TEST_SERIAL := build ensure-chromium tools-cache vet race-deps alerts-test-bin check-mod
# TEST_NICE run at nice 10: CPU-bound, no clock to keep, they yield to the
# parts that keep a pace (scenario-alerts; deploy/e2e and
# real-gpu-validate-sim wait on processes). Putting every other part at
# nice 10 was tried: beside a second make test (load 57) the cost dashboard
# test (then on a real Prometheus in real time) and the validation, starved
# 10:1, failed there instead.
TEST_PARTS ?= scenario-alerts unit-norace unit-race check-rules check-metrics real-gpu-validate-sim check-ptx
TEST_NICE ?= check-rules check-ptx
test:
	@bash scripts/test.sh "$(TEST_SERIAL)" "$(TEST_PARTS)" "$(TEST_NICE)"

# Builds the pinned promtool and helm into the Go build cache (where go tool
# -modfile=tools/go.mod runs them from) without running them.
tools-cache:
	@$(GO) tool -modfile=$(TOOLS_MODFILE) -n promtool >/dev/null
	@$(GO) tool -modfile=$(TOOLS_MODFILE) -n helm >/dev/null

# From a terminal, the demo runs as a job of its own (set -m: its own process
# group, given the terminal), so Ctrl-C reaches the demo and what it started,
# not make: the demo stops, says so, exits 0, and so does make (make that
# got the SIGINT itself would re-raise it and exit 130 whatever the demo
# did). Without a terminal a SIGINT to the group reaches the demo as before.
demo: build
	@if [ -t 0 ]; then bash -c 'set -m; bash scripts/demo.sh "$$1"; rc=$$?; exit $$rc' demo $(BIN); else bash scripts/demo.sh $(BIN); fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout=$(TEST_TIMEOUT) ./...

gpu-smoke:
	@bash scripts/gpu-smoke.sh

# Thanos (sidecar, query), pinned in its own module (tools/thanos/go.mod), as
# bin/thanos. A cold build compiles about 1,600 packages: many minutes of
# both cores, which is why make test does not build it (docs/scaling.md).
# Thanos's own build tags (its .promu.yml): slicelabels above all, the
# Prometheus labels layout its gRPC code casts to its own types; without it
# the sidecar's StoreAPI answers crash (a negative message size).
THANOS_MODFILE := tools/thanos/go.mod
THANOS_TAGS := slicelabels,netgo
thanos:
	$(GO) build -tags $(THANOS_TAGS) -modfile=$(THANOS_MODFILE) -o $(BIN)/thanos github.com/thanos-io/thanos/cmd/thanos

# The two-cluster global view through Thanos on the real engine
# (deploy/e2e's TestThanosGlobalView: two Prometheus with the shipped rules,
# two sidecars, Thanos Query; the dashboards' key queries equal the sum of
# the clusters). Opt-in: make test skips it.
test-thanos: $(BUILD_FIRST) thanos
	CHECK_MOD_THANOS=1 bash scripts/check-mod.sh
	GPULENS_BIN=$(abspath $(BIN)) GPULENS_THANOS=1 $(GO) test -count=1 -timeout=$(TEST_TIMEOUT) -run '^TestThanosGlobalView$$' -v ./deploy/e2e/

# The fleet benchmark (docs/scaling.md#measured): FLEET_SIZES GPUs (nodes of
# 8, served as distinct targets by one process from FLEET_TEMPLATES real
# simulated exporters) scraped every 15 s by the pinned Prometheus with every
# shipped rule file; after FLEET_WINDOW it measures ingestion, head series,
# Prometheus's RSS and CPU, each rule group's evaluation time against its
# interval and every panel query of the fleet, cost and sharing dashboards,
# and prints the markdown tables (also in $(SCRATCH)/fleet-bench/results.md).
# Each size takes about FLEET_WINDOW plus a few minutes; FLEET_DEADLINE bounds
# the whole run, and whatever it started is stopped when it ends, at the deadline or on SIGINT/SIGTERM. Not
# part of make test.
FLEET_SIZES ?= 200 500 1000
FLEET_WINDOW ?= 6m
FLEET_TEMPLATES ?= 4
FLEET_DEADLINE ?= 90m
fleet-bench: build
	$(GO) run ./internal/fleetbench -sizes '$(FLEET_SIZES)' -window $(FLEET_WINDOW) -templates $(FLEET_TEMPLATES) \
		-deadline $(FLEET_DEADLINE) -exporter $(BIN)/gpulens-exporter -prometheus $(BIN)/prometheus \
		-workdir $(SCRATCH)/fleet-bench -out $(SCRATCH)/fleet-bench/results.md


# The real-GPU validation experiment (docs/real-gpu.md): the host's view of
# contention (exporter), the tenant's (gpulens-verify) and nvidia-smi's,
# through idle, one and two workloads (about 2 minutes). Uses bin/ or
# GPULENS_EXPORTER/GPULENS_VERIFY (prebuilt, for a GPU machine without Go);
# writes docs/real-gpu/validation/ (VALIDATE_OUT).
real-gpu-validate:
	@bash scripts/real-gpu-validate.sh

# The same experiment on the simulated fleet (scenario validate): each
# phase runs its own programs in its 60 s of simulated time and ends when
# they are done (no wall-clock phase), every expected value asserted; part
# of make test.
real-gpu-validate-sim: $(BUILD_FIRST)
	@GPULENS_BIN=$(abspath $(BIN)) VALIDATE_OUT=$(abspath $(SCRATCH))/real-gpu-validate-sim bash scripts/real-gpu-validate.sh --sim

# What the exporter's continuous probe costs a latency-sensitive tenant on
# the simulator: probe off, every 30 s on one GPU, and a tensor-parallel
# tenant over 8 GPUs probed one after another or together; the 5-minute
# default derived (docs/benchmarks.md). About 14 minutes; not part of make
# test. PROBE_COST_DURATION, _RATE, _SEED, _INTERVAL, _ARMS override.
probe-tenant-cost: build
	@GPULENS_BIN=$(abspath $(BIN)) PROBE_COST_OUT=$(abspath $(SCRATCH))/probe-tenant-cost bash scripts/probe-tenant-cost.sh

# Assembles the probe's PTX kernels with NVIDIA's ptxas (sm_70/80/90) and
# tests the libcuda binding against the real driver library, both fetched
# once from Debian's non-free archive into $(SCRATCH)/cuda (no GPU needed).
check-ptx:
	@bash scripts/check-ptx.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN) $(SCRATCH) $(DIST)
