#!/usr/bin/env bash
# make demo: the whole gpulens stack on a machine with no GPU.
#   - gpulens-exporter on a simulated fleet, with the probe (the tenant's
#     view: stolen time, bandwidths, FLOP/s) every 30 s,
#   - gpulens-loadgen sim, a simulated OpenAI-compatible inference server
#     (a reasoning model: DEMO_REASONING_TOKENS of thinking, default 64,
#     before each answer; 0 turns it off)
#     standing for llm-serve on GPU 0 of the simulated fleet: it reads the
#     exporter's view of GPU 0 and slows down by the share of the GPU its
#     neighbours take, so a neighbour joining shows as contention, TTFT,
#     cost per request and an alert on one time axis,
#   - gpulens-loadgen run, sustained load against it (a fixed number of
#     users: the requests per GPU-hour, hence the cost per request, follow
#     the server's speed) with a GPU price set,
#   - a real Prometheus (pinned in tools/go.mod; bin/prometheus from make build)
#     scraping all three (the load generator's native histograms too) and
#     evaluating the shipped rules in alerts/.
# Runs until Ctrl-C, then stops everything it started. All files it writes
# live under .scratch/demo.
#
# Ports and the scenario are environment variables (Makefile variables of the
# same names): DEMO_EXPORTER_ADDR, DEMO_SIM_ADDR, DEMO_LOADGEN_ADDR,
# DEMO_PROMETHEUS_ADDR, DEMO_SCENARIO, DEMO_CONCURRENCY, DEMO_GPU_HOURLY_USD,
# and DEMO_SIM_GPU / DEMO_SIM_PID: the GPU and the tenant (PID) of the
# scenario the simulated server stands for (GPU 0, llm-serve's 4242 in demo).
# GPU prices: each GPU has its own (docs/cost.md): the scenario's
# price_usd_per_hour (DEMO_SCENARIO=mixed-fleet: H100s, A100s and an A30
# from two providers, with chargeback numbers that check by hand), else the
# price table of alerts/gpulens-cost.rules.yml (2.50 an H100). The load
# generator bills the price the exporter serves for DEMO_SIM_GPU. A
# DEMO_GPU_HOURLY_USD prices every GPU the same instead
# (--cost.gpu-hourly-usd).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

bin=${1:-bin}
exporter_addr=${DEMO_EXPORTER_ADDR:-127.0.0.1:9842}
sim_addr=${DEMO_SIM_ADDR:-127.0.0.1:8000}
loadgen_addr=${DEMO_LOADGEN_ADDR:-127.0.0.1:9843}
prom_addr=${DEMO_PROMETHEUS_ADDR:-127.0.0.1:9090}
scenario=${DEMO_SCENARIO:-demo}
concurrency=${DEMO_CONCURRENCY:-16}
sim_gpu=${DEMO_SIM_GPU:-0}
sim_pid=${DEMO_SIM_PID:-4242}
price=${DEMO_GPU_HOURLY_USD:-}
reasoning=${DEMO_REASONING_TOKENS:-64}

scratch=.scratch/demo
rm -rf "$scratch"
mkdir -p "$scratch/tsdb"
# Ctrl-C sends SIGINT to the whole foreground process group: make, this
# shell and every program it started. The programs stop on their own;
# this shell stops the rest, says so in one line and exits 0. Any other
# exit (a program that died, a failed start) is an error.
stopping=0
on_exit() {
	local rc=$?
	stop_all
	if [ "$stopping" = 1 ]; then
		echo
		echo "gpulens demo stopped (logs: $scratch)"
	elif [ "$rc" -ne 0 ]; then
		echo "gpulens demo stopped after an error (exit $rc; logs: $scratch/*.log)" >&2
	fi
}
trap on_exit EXIT
trap 'stopping=1; exit 0' INT TERM

# all_exited SECONDS: whether every program the demo started has exited
# within SECONDS.
all_exited() {
	local i p alive
	for i in $(seq 1 $(($1 * 5))); do
		alive=0
		for p in "${PIDS[@]}"; do
			if kill -0 "$p" 2>/dev/null; then alive=1; fi
		done
		if [ "$alive" = 0 ]; then return 0; fi
		sleep 0.2
	done
	return 1
}

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
	go build -modfile=tools/go.mod -o "$prometheus" github.com/prometheus/prometheus/cmd/prometheus
fi

price_flags=()
if [ -n "$price" ]; then price_flags=(--cost.gpu-hourly-usd="$price"); fi
start_bg "$scratch/exporter.log" "$bin/gpulens-exporter" --sim.scenario="$scenario" --web.listen-address="$exporter_addr" \
	--collector.probe --collector.probe.interval=30s "${price_flags[@]}"
wait_http "http://$exporter_addr/metrics" exporter
if [ -z "$price" ]; then
	# The price of the simulated server's GPU, once the exporter serves it
	# (its first sampler cycle); the price table's H100 price without one.
	for _ in $(seq 1 25); do
		price=$({ curl -fsS "http://$exporter_addr/metrics" || true; } |
			awk -v gpu="gpu=\"$sim_gpu\"" 'index($0, "gpulens_gpu_price_usd_per_hour{") == 1 && index($0, gpu) && !found { print $NF; found = 1 }')
		if [ -n "$price" ]; then break; fi
		sleep 0.2
	done
	price=${price:-2.50}
fi
start_bg "$scratch/sim.log" "$bin/gpulens-loadgen" sim --sim.listen-address="$sim_addr" \
	--sim.gpu.exporter-url="http://$exporter_addr/metrics" --sim.gpu="$sim_gpu" --sim.gpu.pid="$sim_pid" \
	--sim.reasoning-tokens="$reasoning"
wait_http "http://$sim_addr/health" sim
start_bg "$scratch/loadgen.log" "$bin/gpulens-loadgen" run \
	--target="http://$sim_addr/v1" --model=gpulens-sim --concurrency="$concurrency" --duration=24h \
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
	# Native histograms (latency percentiles within ~5 %) and classic buckets,
	# as deploy/prometheus/prometheus.yml.
	echo "  - {job_name: gpulens-loadgen, scrape_native_histograms: true, always_scrape_classic_histograms: true,"
	echo "     static_configs: [{targets: ['$loadgen_addr'], labels: {cluster: local}}]}"
	echo "  - {job_name: gpulens-sim, static_configs: [{targets: ['$sim_addr'], labels: {cluster: local}}]}"
} >"$scratch/prometheus.yml"
start_bg "$scratch/prometheus.log" "$prometheus" --config.file="$scratch/prometheus.yml" \
	--storage.tsdb.path="$scratch/tsdb" --web.listen-address="$prom_addr"
wait_http "http://$prom_addr/-/ready" prometheus

cat <<TXT

gpulens demo is running (simulated GPUs: scenario $scenario; nothing here touches a real GPU).

  exporter metrics     http://$exporter_addr/metrics
  inference simulator  http://$sim_addr/v1   (vLLM-style metrics: http://$sim_addr/metrics;
                       on GPU $sim_gpu as PID $sim_pid: gpulens_sim_slowdown_ratio)
  load generator       http://$loadgen_addr/metrics   ($concurrency users, GPU at \$$price/h)
  Prometheus           http://$prom_addr   (targets: http://$prom_addr/targets, alerts: http://$prom_addr/alerts)

Rule files loaded: ${#rules[@]}.
GPU prices and chargeback: dashboard "gpulens / Cost" (per-GPU prices from the
scenario or the rules' price table; docs/cost.md). DEMO_SCENARIO=mixed-fleet
prices H100s, A100s and an A30 from two providers: 16.40 USD an hour, by
allocation serving 5.80, research 4.00, team-b 2.35, team-a 1.75.
TXT
if [ "$scenario" = demo ]; then
	cat <<TXT
The neighbour on GPU 0, on one time axis (dashboard "gpulens / Sharing and
contention", row "Is the neighbour hurting latency and cost?"):
  1.5 min  batch-train (research, 70 % SM) joins llm-serve (serving) on GPU 0:
           the contention ratio climbs to 1; the simulated server, standing for
           llm-serve, slows down 1.7x (gpulens_sim_slowdown_ratio): TTFT and ITL
           up ~1.7x, requests per GPU-hour down, cost per 1,000 requests up ~1.7x
  ~13 min  GpulensGPUHighContention fires on GPU 0 (a latency SLO tenant shares it)
  ~31 min  batch-train leaves (back at 41): contention, latency and cost drop back
Other alerts to watch (the scenario's header, internal/sim/gpusim/scenarios/demo.yaml,
lists them all, with the shipped 'for:' durations):
  ~4 min   GpulensGPUXIDApplicationError        GPU 7: a batch job trips XID 13 (severity info)
  ~15 min  GpulensGPUMemoryExhaustionPredicted  GPU 1: a process leaks VRAM
  ~17 min  GpulensNVMLCallsFailing              GPU 3's PCIe replay counter call fails
  ~18 min  GpulensGPUStolenTimeHigh             GPU 1: the invisible neighbour below (pending from ~3)
  ~25 min  GpulensGPUMemoryHeadroomLow          GPU 1: under 5 % free
  pending states show up in a minute or two at http://$prom_addr/alerts
The probe (every 30 s) sees what NVML cannot: on GPU 1 an invisible neighbour
takes half the GPU from 2 to 7 minutes of every 10 (stolen time ~0.5, device copy
and FLOP/s halved). Dashboards: GPU detail, row "Is this GPU mine?".
TXT
fi
cat <<TXT
Try in Prometheus:
  rate(gpulens_gpu_busy_seconds_total[1m])
  histogram_quantile(0.99, sum(rate(gpulens_loadgen_time_to_first_token_seconds[1m])))   (native histogram)
  histogram_quantile(0.99, sum(rate(gpulens_loadgen_time_to_first_answer_token_seconds[1m])))   (after the thinking)
  gpulens_sim_slowdown_ratio
  gpulens_loadgen_cost_per_request_usd
  gpulens_probe_stolen_time_ratio

Logs: $scratch/*.log. Press Ctrl-C to stop everything.
TXT
while true; do
	for p in "${PIDS[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			# Ctrl-C stops every program at once (they handle SIGINT),
			# where a crash stops one; and this shell cannot trap a SIGINT
			# it was started with ignored (make demo run in the background).
			if all_exited 10; then
				stopping=1
				exit 0
			fi
			rc=0
			wait "$p" || rc=$?
			echo "a demo process ($p) exited (status $rc); see $scratch/*.log" >&2
			exit 1
		fi
	done
	sleep 2
done
