#!/usr/bin/env bash
# Lints live scrapes of the simulated exporter (every built-in scenario, the
# probe on) with the pinned promtool and checks that every documented metric
# family is present on the dgx-h100 scenario. Usage: check-metrics.sh BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
bin=${1:-bin}
work=$(mktemp -d)
trap 'stop_all; rm -rf "$work"' EXIT

# Build the pinned promtool once (slow when the cache is cold).
go tool -n promtool >/dev/null

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
for sc in $(cd internal/gpusim/scenarios && ls *.yaml | sed 's/\.yaml$//'); do
	scrape_scenario "$sc"
	if out=$(go tool promtool check metrics <"$work/$sc.prom" 2>&1) && [ -z "$out" ]; then
		echo "promtool check metrics: scenario $sc clean ($(grep -vc '^#' "$work/$sc.prom") samples)"
	else
		echo "promtool check metrics: scenario $sc has problems:"
		echo "$out"
		status=1
	fi
done

# Every family documented in docs/metrics.md must be served on dgx-h100, or
# on the scenario that has what it describes: per-process series on
# noisy-neighbour (dgx-h100 has no tenants), MIG series on mig-mixed. XID,
# NVML and probe error counters appear with the first event or error, and pod
# allocations need a kubelet, so those are only checked to be documented.
missing=0
for fam in $(sed -n 's/^| `\(gpulens_[a-z0-9_]*\)`.*/\1/p' docs/metrics.md | sort -u); do
	sc=dgx-h100
	case $fam in
	gpulens_gpu_xid_errors_total | gpulens_gpu_last_xid_timestamp_seconds | gpulens_gpu_fan_speed_ratio | gpulens_nvml_errors_total | gpulens_gpu_allocation_info | gpulens_probe_errors_total) continue ;;
	gpulens_process_folded) ;;
	gpulens_process_*) sc=noisy-neighbour ;;
	gpulens_mig_*) sc=mig-mixed ;;
	esac
	if ! grep -q "^$fam[{ ]" "$work/$sc.prom" && ! grep -q "^${fam}_bucket{" "$work/$sc.prom"; then
		echo "documented metric $fam is missing from the $sc scrape"
		missing=1
	fi
done
gpus=$(grep -c '^gpulens_gpu_up{.*} 1$' "$work/dgx-h100.prom" || true)
if [ "$gpus" != 8 ]; then
	echo "dgx-h100: $gpus GPUs up, want 8"
	status=1
fi
[ $missing = 0 ] || status=1
exit $status
