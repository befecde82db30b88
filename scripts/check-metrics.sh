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

# The pinned promtool, from the tools module (tools/go.mod); built once here
# (slow when the cache is cold).
promtool=(go tool -modfile=tools/go.mod promtool)
go tool -modfile=tools/go.mod -n promtool >/dev/null

scrape_scenario() { # scenario -> $work/<scenario>.prom
	local sc=$1 log="$work/$1.log" addr
	start_bg "$log" "$bin/gpulens-exporter" --sim.scenario="$sc" --web.listen-address=127.0.0.1:0 --sampler.interval=200ms \
		--collector.probe --collector.probe.interval=1m
	addr=$(listen_addr "$log")
	sleep 1.5 # a few sampler cycles and the probe's first run (at start)
	curl -fsS "http://$addr/metrics" >"$work/$sc.prom"
	stop_all
}

status=0
# The built-in scenarios (the --help text wraps their list: read the files).
for sc in $(cd internal/sim/gpusim/scenarios && ls *.yaml | sed 's/\.yaml$//'); do
	scrape_scenario "$sc"
	if out=$("${promtool[@]}" check metrics <"$work/$sc.prom" 2>&1) && [ -z "$out" ]; then
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
