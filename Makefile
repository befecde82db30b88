# gpulens — build, test and demo targets. See README.md.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1
# go-nvml's C headers mark many calls deprecated; silence the noise.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations

BIN := bin
SCRATCH := .scratch
# The pinned tools (the Prometheus server, promtool, helm) live in their own
# module, tools/go.mod, so go.mod lists only what the product imports. Run one
# from the repository root as `go tool -modfile=tools/go.mod NAME ARGS`, e.g.
# `go tool -modfile=tools/go.mod promtool check rules alerts/*.rules.yml`;
# tidy it with `cd tools && go mod tidy` (check-mod checks both modules).
TOOLS_MODFILE := tools/go.mod
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/prometheus/common/version.Version=$(VERSION) \
           -X github.com/prometheus/common/version.Revision=$(REVISION) \
           -X github.com/prometheus/common/version.Branch=main

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

.PHONY: all build tools test check vet unit ensure-chromium check-mod check-metrics check-rules dashboards generate demo bench gpu-smoke check-ptx fmt clean real-gpu-validate real-gpu-validate-sim

all: build

# The binaries, and the pinned Prometheus server from tools/go.mod (for the
# demo and the end-to-end tests).
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...
	$(GO) build -modfile=$(TOOLS_MODFILE) -o $(BIN)/prometheus github.com/prometheus/prometheus/cmd/prometheus

# The pinned tools as binaries in bin/ (prometheus, promtool, helm), e.g. to
# copy to a machine without Go (scripts/gpu-smoke.sh's PROMTOOL).
tools:
	$(GO) build -modfile=$(TOOLS_MODFILE) -o $(BIN)/ tool

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# The alerts tests scrape the built binaries (GPULENS_BIN) instead of
# building their own.
# The HTML report is checked in headless Chromium (Debian's package,
# installed when missing).
unit: build ensure-chromium
	GPULENS_BIN=$(abspath $(BIN)) GPULENS_REQUIRE_CHROMIUM=1 $(GO) test -race -count=1 -timeout=$(TEST_TIMEOUT) ./...

# The inner loop: gofmt and vet, then every test that needs no real
# Prometheus, promtool, Chromium or build of a tool (-short skips those).
# Warm, about 80 s on two busy cores; 10 s when nothing changed
# (docs/benchmarks.md#test-loop).
check: vet
	$(GO) test -short -timeout=$(TEST_TIMEOUT) ./...

ensure-chromium:
	@bash scripts/ensure-chromium.sh

# go mod tidy leaves go.mod/go.sum and tools/go.mod/go.sum unchanged, and the
# modules both use are at the same version in both (one build cache).
check-mod:
	@bash scripts/check-mod.sh

# Lints a live scrape of the simulated exporter with the pinned promtool.
check-metrics: build
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

test: vet check-mod unit check-metrics check-rules check-ptx real-gpu-validate-sim

demo: build
	@bash scripts/demo.sh $(BIN)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout=$(TEST_TIMEOUT) ./...

gpu-smoke:
	@bash scripts/gpu-smoke.sh

# The real-GPU validation experiment (docs/real-gpu.md): the host's view of
# contention (exporter), the tenant's (gpulens-verify) and nvidia-smi's,
# through idle, one and two workloads (about 2 minutes). Uses bin/ or
# GPULENS_EXPORTER/GPULENS_VERIFY (prebuilt, for a GPU machine without Go);
# writes docs/real-gpu/validation/ (VALIDATE_OUT).
real-gpu-validate:
	@bash scripts/real-gpu-validate.sh

# The same experiment on the simulated fleet (scenario validate), phases
# compressed to 13 s, every expected value asserted; part of make test.
real-gpu-validate-sim: build
	@GPULENS_BIN=$(abspath $(BIN)) VALIDATE_OUT=$(abspath $(SCRATCH))/real-gpu-validate-sim bash scripts/real-gpu-validate.sh --sim

# Assembles the probe's PTX kernels with NVIDIA's ptxas (sm_70/80/90) and
# tests the libcuda binding against the real driver library, both fetched
# once from Debian's non-free archive into $(SCRATCH)/cuda (no GPU needed).
check-ptx:
	@bash scripts/check-ptx.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN) $(SCRATCH)
