#!/usr/bin/env bash
# make demo: the whole gpulens stack on a machine with no GPU.
#   - gpulens-exporter on a simulated fleet, with the probe (the tenant's
#     view: stolen time, bandwidths, FLOP/s) every 30 s,
#   - gpulens-loadgen sim, a simulated OpenAI-compatible inference server,
#   - gpulens-loadgen run, sustained load against it with a GPU price set,
#   - a real Prometheus (pinned in go.mod, run as `go tool prometheus`)
#     scraping all three and evaluating the shipped rules in alerts/.
# Runs until Ctrl-C, then stops everything it started. All files it writes
# live under .scratch/demo.
#
# Ports and the scenario are environment variables (Makefile variables of the
# same names): DEMO_EXPORTER_ADDR, DEMO_SIM_ADDR, DEMO_LOADGEN_ADDR,
# DEMO_PROMETHEUS_ADDR, DEMO_SCENARIO, DEMO_RATE, DEMO_GPU_HOURLY_USD.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

bin=${1:-bin}
exporter_addr=${DEMO_EXPORTER_ADDR:-127.0.0.1:9842}
sim_addr=${DEMO_SIM_ADDR:-127.0.0.1:8000}
loadgen_addr=${DEMO_LOADGEN_ADDR:-127.0.0.1:9843}
prom_addr=${DEMO_PROMETHEUS_ADDR:-127.0.0.1:9090}
scenario=${DEMO_SCENARIO:-demo}
rate=${DEMO_RATE:-8}
price=${DEMO_GPU_HOURLY_USD:-2.50}

scratch=.scratch/demo
rm -rf "$scratch"
mkdir -p "$scratch/tsdb"
trap 'echo; echo "stopping demo..."; stop_all; echo "stopped; logs kept in $scratch"' EXIT
trap 'exit 0' INT TERM

wait_http() { # url name
	local i
	for i in $(seq 1 300); do
		if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
		sleep 0.2
	done
	echo "$2 did not answer at $1 within 60 s; its log:" >&2
	cat "$scratch/$2.log" >&2
	exit 1
}

prometheus=$bin/prometheus
if [ ! -x "$prometheus" ]; then
	echo "building the pinned Prometheus (first time: a few minutes)..."
	prometheus=$scratch/prometheus
	go build -o "$prometheus" github.com/prometheus/prometheus/cmd/prometheus
fi

start_bg "$scratch/exporter.log" "$bin/gpulens-exporter" --sim.scenario="$scenario" --web.listen-address="$exporter_addr" \
	--collector.probe --collector.probe.interval=30s
start_bg "$scratch/sim.log" "$bin/gpulens-loadgen" sim --sim.listen-address="$sim_addr"
wait_http "http://$exporter_addr/metrics" exporter
wait_http "http://$sim_addr/health" sim
start_bg "$scratch/loadgen.log" "$bin/gpulens-loadgen" run \
	--target="http://$sim_addr/v1" --model=gpulens-sim --rate="$rate" --arrival=poisson --duration=24h \
	--scenario=demo --cost.gpu-hourly-usd="$price" --exporter.url="http://$exporter_addr/metrics" \
	--output="$scratch/loadgen-report.json" --web.listen-address="$loadgen_addr" --no-progress
wait_http "http://$loadgen_addr/metrics" loadgen

rules=()
for f in alerts/*.rules.yml alerts/*rules*.yaml; do [ -f "$f" ] && rules+=("$PWD/$f"); done
{
	echo "global: {scrape_interval: 5s, evaluation_interval: 5s}"
	if [ ${#rules[@]} -gt 0 ]; then
		echo "rule_files:"
		for f in "${rules[@]}"; do echo "  - $f"; done
	fi
	echo "scrape_configs:"
	echo "  - {job_name: gpulens-exporter, static_configs: [{targets: ['$exporter_addr'], labels: {cluster: local}}]}"
	echo "  - {job_name: gpulens-loadgen, static_configs: [{targets: ['$loadgen_addr'], labels: {cluster: local}}]}"
	echo "  - {job_name: gpulens-sim, static_configs: [{targets: ['$sim_addr'], labels: {cluster: local}}]}"
} >"$scratch/prometheus.yml"
start_bg "$scratch/prometheus.log" "$prometheus" --config.file="$scratch/prometheus.yml" \
	--storage.tsdb.path="$scratch/tsdb" --web.listen-address="$prom_addr"
wait_http "http://$prom_addr/-/ready" prometheus

cat <<TXT

gpulens demo is running (simulated GPUs: scenario $scenario; nothing here touches a real GPU).

  exporter metrics     http://$exporter_addr/metrics
  inference simulator  http://$sim_addr/v1   (vLLM-style metrics: http://$sim_addr/metrics)
  load generator       http://$loadgen_addr/metrics   ($rate req/s Poisson, GPU at \$$price/h)
  Prometheus           http://$prom_addr   (targets: http://$prom_addr/targets, alerts: http://$prom_addr/alerts)

Rule files loaded: ${#rules[@]}.
TXT
if [ "$scenario" = demo ]; then
	cat <<TXT
Alerts to watch (scenario demo; times from the start, with the shipped 'for:' durations):
  ~4 min   GpulensGPUXIDApplicationError        GPU 7: a batch job trips XID 13 (severity info)
  ~9 min   GpulensGPUMemoryExhaustionPredicted  GPU 1: a process leaks VRAM (fills the card in 5 min, restarts every 30)
  ~13 min  GpulensGPUHighContention             GPU 0: batch-train (research) joins llm-serve (serving) after 90 s
  ~15 min  GpulensGPUMemoryHeadroomLow          GPU 1: under 5 % free
  pending states show up in a minute or two at http://$prom_addr/alerts
The probe (every 30 s) sees what NVML cannot: on GPU 1 an invisible neighbour
takes half the GPU from 2 to 6 minutes of every 10 (stolen time ~0.5, device
copy and FLOP/s halved; 4 minutes is too short for GpulensGPUStolenTimeHigh's
15). Dashboards: GPU detail, row "Is this GPU mine?".
TXT
fi
cat <<TXT
Try in Prometheus:
  rate(gpulens_gpu_busy_seconds_total[1m])
  histogram_quantile(0.99, sum by (le) (rate(gpulens_loadgen_time_to_first_token_seconds_bucket[1m])))
  gpulens_loadgen_cost_per_request_usd
  gpulens_probe_stolen_time_ratio

Logs: $scratch/*.log. Press Ctrl-C to stop everything.
TXT
while true; do
	for p in "${PIDS[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			echo "a demo process ($p) exited; see $scratch/*.log" >&2
			exit 1
		fi
	done
	sleep 2
done
