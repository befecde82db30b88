#!/usr/bin/env bash
# What the exporter's continuous probe costs a latency-sensitive tenant, on
# the simulator (docs/benchmarks.md, "What the probe costs the tenant"):
# `make probe-tenant-cost`. Not part of `make test`: it runs for about
# (number of arms) x (PROBE_COST_DURATION + 20 s).
#
# Each arm, one after another on loopback ports: the exporter on an 8-GPU
# simulated node (every GPU busy 60 % with one rank of the tenant, pids
# 4200-4207), the simulated inference server tied to it (GPU 0 alone, or
# GPUs 0-7 as a tensor-parallel server whose every step waits for the
# slowest GPU) standing for the tenant, and gpulens-loadgen at a fixed
# Poisson rate, streaming, with every request's record kept. Then, per arm:
# TTFT and ITL percentiles from the records, the probe runs the server saw
# and the share of requests the probe slowed (gpulens_sim_probe_slowed_requests_total).
#
# Arms (PROBE_COST_ARMS):
#   off    no probe, tied to GPU 0
#   one    probe every PROBE_COST_INTERVAL, tied to GPU 0
#   seq8   probe every PROBE_COST_INTERVAL, GPUs one after another, tied to GPUs 0-7
#   tog8   probe every PROBE_COST_INTERVAL, GPUs together, tied to GPUs 0-7
#
# A probe at the default 5-minute interval touches 1/10 as many requests as
# one every 30 s (the same span per run, 10 times rarer), so its
# distributions are the off arm's and a 30-s arm's mixed 9:1 (each record
# of the 30-s arm weighted 1/10, each of the off arm 9/10); the script
# prints them as "derived" rows (same seed: the same arrivals in every arm).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

BIN=${GPULENS_BIN:-bin}
OUT=${PROBE_COST_OUT:-.scratch/probe-tenant-cost}
DURATION=${PROBE_COST_DURATION:-180s}
RATE=${PROBE_COST_RATE:-10}
SEED=${PROBE_COST_SEED:-7}
INTERVAL=${PROBE_COST_INTERVAL:-30s}
ARMS=${PROBE_COST_ARMS:-off one seq8 tog8}
EXPORTER_PORT=${PROBE_COST_EXPORTER_PORT:-19852}
SERVER_PORT=${PROBE_COST_SERVER_PORT:-18052}
DEFAULT_INTERVAL_S=300

mkdir -p "$OUT"
trap stop_all EXIT

cat >"$OUT/node.yaml" <<'EOF'
name: probe-tenant-cost
description: one 8-GPU node serving a latency-sensitive tenant, one rank per GPU
devices:
  - count: 8
    model: h100-sxm5-80gb
tenants:
EOF
for i in 0 1 2 3 4 5 6 7; do
	echo "  - {name: llm-serve-$i, gpu: $i, pid: 420$i, process: python3, container: vllm, pod: vllm-0, namespace: serving, sm_util: {shape: constant, value: 60, noise: 3}, memory: 30720}" >>"$OUT/node.yaml"
done

interval_s() { # 30s, 5m -> seconds
	local v=$1
	case $v in
	*m) echo $((${v%m} * 60)) ;;
	*s) echo "${v%s}" ;;
	*) echo "$v" ;;
	esac
}

# metric NAME[{LABELS}] FILE: the value of a series in an exposition.
metric() { awk -v k="$1" 'index($0, k" ") == 1 || index($0, k"{") == 1 { s += $NF } END { printf "%g", s + 0 }' "$2"; }

run_arm() {
	local arm=$1 probe=() gpus=0 pids=4200
	case $arm in
	off) ;;
	one) probe=(--collector.probe "--collector.probe.interval=$INTERVAL") ;;
	seq8) probe=(--collector.probe "--collector.probe.interval=$INTERVAL" --collector.probe.schedule=sequential) ;;
	tog8) probe=(--collector.probe "--collector.probe.interval=$INTERVAL" --collector.probe.schedule=together) ;;
	*)
		echo "unknown arm $arm (off, one, seq8, tog8)" >&2
		return 2
		;;
	esac
	case $arm in *8) gpus=0,1,2,3,4,5,6,7 pids=4200,4201,4202,4203,4204,4205,4206,4207 ;; esac
	local dir=$OUT/$arm
	rm -rf "$dir"
	mkdir -p "$dir"
	start_bg "$dir/exporter.log" "$BIN/gpulens-exporter" "--sim.scenario=$OUT/node.yaml" \
		"--web.listen-address=127.0.0.1:$EXPORTER_PORT" "${probe[@]}"
	listen_addr "$dir/exporter.log" >/dev/null
	if [ ${#probe[@]} -gt 0 ]; then # the first run, at start, is older than the tie: wait it out
		for _ in $(seq 1 100); do
			grep -q 'probe: device measured' "$dir/exporter.log" && break
			sleep 0.1
		done
	fi
	start_bg "$dir/server.log" "$BIN/gpulens-loadgen" sim "--sim.listen-address=127.0.0.1:$SERVER_PORT" \
		"--sim.gpu.exporter-url=http://127.0.0.1:$EXPORTER_PORT/metrics" "--sim.gpu=$gpus" "--sim.gpu.pid=$pids" \
		--sim.gpu.poll-interval=200ms "--sim.seed=$SEED"
	for _ in $(seq 1 100); do
		curl -fs "http://127.0.0.1:$SERVER_PORT/health" >/dev/null && break
		sleep 0.1
	done
	local load0
	load0=$(cut -d' ' -f1 /proc/loadavg)
	"$BIN/gpulens-loadgen" run "--target=http://127.0.0.1:$SERVER_PORT/v1" --model=gpulens-sim \
		"--rate=$RATE" --arrival=poisson "--duration=$DURATION" "--seed=$SEED" \
		--input-tokens=fixed:256 --output-tokens=fixed:128 --embed-requests \
		"--output=$dir/report.json" --no-progress >"$dir/loadgen.log" 2>&1
	curl -fs "http://127.0.0.1:$SERVER_PORT/metrics" >"$dir/server-metrics.txt"
	echo "$load0 $(cut -d' ' -f1 /proc/loadavg)" >"$dir/load.txt"
	stop_all
}

# stats WEIGHTED_INPUTS...: "file:weight" pairs; prints requests, TTFT p50
# p99 max (ms), ITL p50 p99 max (ms) over the records, each record (and each
# of its gaps) weighted.
stats() {
	local args=() i=0 f
	for f in "$@"; do
		args+=(--slurpfile "r$i" "${f%%:*}" --argjson "w$i" "${f##*:}")
		i=$((i + 1))
	done
	jq -rn "${args[@]}" --argjson n "$i" '
		def recs($k): $ARGS.named["r\($k)"][0].runs[0].requests
			| map(select((.error_class // "") == "" and .first_token_ns != null));
		def w($k): $ARGS.named["w\($k)"];
		# weighted quantile: the smallest value whose cumulative weight reaches q
		def wq($q): sort_by(.[0]) as $s | ($s | map(.[1]) | add) as $tot
			| first(foreach $s[] as $p (0; . + $p[1]; if . >= $q * $tot then $p[0] else empty end));
		[range(0; $n) as $k | recs($k)[] | [((.first_token_ns - .sent_ns) / 1e6), w($k)]] as $ttft
		| [range(0; $n) as $k | recs($k)[] | .chunk_offsets_ns as $c
			| range(1; $c | length) as $j | [(($c[$j] - $c[$j - 1]) / 1e6), w($k)]] as $itl
		| [([range(0; $n) as $k | recs($k) | length] | add),
		   ($ttft | wq(0.5)), ($ttft | wq(0.99)), ($ttft | map(.[0]) | max),
		   ($itl | wq(0.5)), ($itl | wq(0.99)), ($itl | map(.[0]) | max)]
		| "\(.[0]) \(.[1]*10|round/10) \(.[2]*10|round/10) \(.[3]*10|round/10) \(.[4]*100|round/100) \(.[5]*100|round/100) \(.[6]*10|round/10)"'
}

# PROBE_COST_RUN: the arms to run (default all of ARMS); the table covers
# ARMS, from what OUT holds (rerun one arm, e.g. off on a quieter machine,
# with PROBE_COST_RUN=off).
for arm in ${PROBE_COST_RUN-$ARMS}; do
	echo "arm $arm: $DURATION at $RATE req/s (seed $SEED)" >&2
	run_arm "$arm"
done

int=$(interval_s "$INTERVAL")
printf '| arm | load avg | requests | probe runs seen | slowed: first token | slowed: any token | TTFT p50 | TTFT p99 | TTFT max | ITL p50 | ITL p99 | ITL max |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for arm in $ARMS; do
	dir=$OUT/$arm
	read -r n t50 t99 tmax i50 i99 imax < <(stats "$dir/report.json:1")
	m=$dir/server-metrics.txt
	ok=$(metric 'vllm:request_success_total' "$m")
	first=$(metric 'gpulens_sim_probe_slowed_requests_total{until="first_token"}' "$m")
	end=$(metric 'gpulens_sim_probe_slowed_requests_total{until="end"}' "$m")
	runs=$(metric gpulens_sim_gpu_probe_runs_total "$m")
	share() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f %%", 100 * a / b; else printf "-" }'; }
	label=$arm
	[ "$arm" != off ] && label="$arm every $INTERVAL"
	printf '| %s | %s | %s | %s | %s | %s | %s ms | %s ms | %s ms | %s ms | %s ms | %s ms |\n' "$label" "$(tr ' ' '-' <"$dir/load.txt")" "$n" "$runs" \
		"$(share "$first" "$ok")" "$(share "$end" "$ok")" "$t50" "$t99" "$tmax" "$i50" "$i99" "$imax"
	# The default interval, derived: the off arm and this arm mixed.
	if [ "$arm" != off ] && [ -f "$OUT/off/report.json" ] && [ "$int" -lt "$DEFAULT_INTERVAL_S" ]; then
		k=$(awk -v a="$int" -v b="$DEFAULT_INTERVAL_S" 'BEGIN { printf "%.6f", a / b }')
		read -r n t50 t99 tmax i50 i99 imax < <(stats "$OUT/off/report.json:$(awk -v k="$k" 'BEGIN { printf "%.6f", 1 - k }')" "$dir/report.json:$k")
		printf '| %s every %ss, derived | | | | %s | %s | %s ms | %s ms | | %s ms | %s ms | |\n' "${arm}" "$DEFAULT_INTERVAL_S" \
			"$(share "$(awk -v a="$first" -v k="$k" 'BEGIN { print a * k }')" "$ok")" "$(share "$(awk -v a="$end" -v k="$k" 'BEGIN { print a * k }')" "$ok")" \
			"$t50" "$t99" "$i50" "$i99"
	fi
done
echo "records and logs: $OUT" >&2
