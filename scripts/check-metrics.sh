#!/usr/bin/env bash
# Lints live scrapes of the simulated exporter (every built-in scenario, the
# probe on) with the pinned promtool. Which families the exporter serves, and
# that docs/metrics.md documents exactly those, is checked by go test
# ./cmd/gpulens-exporter (golden_test.go). Usage: check-metrics.sh BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
bin=${1:-bin}
work=$(mktemp -d)
trap 'stop_all; rm -rf "$work"' EXIT

# The pinned promtool, from the tools module (tools/go.mod), built once
# (slow when the cache is cold) and run by path: `go tool` would spend about
# a second of CPU per run checking that it is up to date.
promtool=$(go tool -modfile=tools/go.mod -n promtool)

# The built-in scenarios (the --help text wraps their list: read the files).
scenarios=$(cd internal/sim/gpusim/scenarios && ls *.yaml | sed 's/\.yaml$//')

# Every scenario's exporter at once (each on its own port), a few sampler
# cycles and the probe's first run (at start) later scraped, then stopped:
# the same scrapes as one after another, in the time of one.
declare -A addr=()
for sc in $scenarios; do
	start_bg "$work/$sc.log" "$bin/gpulens-exporter" --sim.scenario="$sc" --web.listen-address=127.0.0.1:0 --sampler.interval=200ms \
		--collector.probe --collector.probe.interval=1m
done
for sc in $scenarios; do
	addr[$sc]=$(listen_addr "$work/$sc.log")
done
sleep 1.5 # from the last one listening: a few sampler cycles, the probe's first run
for sc in $scenarios; do
	curl -fsS "http://${addr[$sc]}/metrics" >"$work/$sc.prom"
done
stop_all

status=0
for sc in $scenarios; do
	if out=$("$promtool" check metrics <"$work/$sc.prom" 2>&1) && [ -z "$out" ]; then
		echo "promtool check metrics: scenario $sc clean ($(grep -vc '^#' "$work/$sc.prom") samples)"
	else
		echo "promtool check metrics: scenario $sc has problems:"
		echo "$out"
		status=1
	fi
done

gpus=$(grep -c '^gpulens_gpu_up{.*} 1$' "$work/dgx-h100.prom" || true)
if [ "$gpus" != 8 ]; then
	echo "dgx-h100: $gpus GPUs up, want 8"
	status=1
fi
exit $status
