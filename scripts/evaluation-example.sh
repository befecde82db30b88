#!/usr/bin/env bash
# The evaluation worked example of docs/evaluation.md: the same workload on
# two simulated "hosts", an H100-like and an L4-like one, each a simulated
# GPU (gpulens-exporter --sim.scenario, scripts/evaluation-example/*.yaml)
# and a simulated inference server (gpulens-loadgen sim, timed like an 8B
# model on that GPU); on each, a concurrency sweep 1-64 with repeats, with
# the per-level GPU side read from the exporter and a GPU price; then the
# HTML report, the campaign cost of each host and the comparison of the two.
# Not part of `make test`: it runs for a few minutes (about 4 on 2 vCPUs).
#
#   scripts/evaluation-example.sh [OUT_DIR]     (default .scratch/evaluation-example)
#
# Environment: EVAL_LEVELS (1,4,16,64), EVAL_REPEATS (3), EVAL_DURATION (6s),
# EVAL_WARMUP (2s), EVAL_H100_USD (2.50), EVAL_L4_USD (0.80), EVAL_PORT_BASE
# (18000: the four loopback ports are base, base+1, base+10, base+11),
# GPULENS_BIN (a folder with gpulens-exporter and gpulens-loadgen already
# built; otherwise they are built into OUT_DIR/bin), EVAL_SCREENSHOTS=1 (also
# write OUT_DIR/report.png and OUT_DIR/compare.png with headless Chromium,
# see scripts/ensure-chromium.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

out=${1:-.scratch/evaluation-example}
levels=${EVAL_LEVELS:-1,4,16,64}
repeats=${EVAL_REPEATS:-3}
duration=${EVAL_DURATION:-6s}
warmup=${EVAL_WARMUP:-2s}
h100_usd=${EVAL_H100_USD:-2.50}
l4_usd=${EVAL_L4_USD:-0.80}
base=${EVAL_PORT_BASE:-18000}
mkdir -p "$out"
trap stop_all EXIT

bin=${GPULENS_BIN:-}
if [ -z "$bin" ]; then
	bin=$out/bin
	mkdir -p "$bin"
	echo "building gpulens-exporter and gpulens-loadgen into $bin..." >&2
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -o "$bin/" ./cmd/gpulens-exporter ./cmd/gpulens-loadgen
fi

wait_http() { # url log
	local i
	for i in $(seq 1 300); do
		if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
		sleep 0.2
	done
	echo "no answer at $1 within 60 s; log $2:" >&2
	cat "$2" >&2
	exit 1
}

# host NAME SCENARIO PRICE PORT SIM-FLAGS...: one host's sweep, written to
# OUT_DIR/NAME.json (and .csv); the exporter and the server are stopped after.
host() {
	local name=$1 scenario=$2 price=$3 port=$4
	shift 4
	local exporter=127.0.0.1:$port sim=127.0.0.1:$((port + 1))
	start_bg "$out/$name-exporter.log" "$bin/gpulens-exporter" --sim.scenario="$scenario" --web.listen-address="$exporter"
	start_bg "$out/$name-sim.log" "$bin/gpulens-loadgen" sim --sim.listen-address="$sim" "$@"
	wait_http "http://$exporter/metrics" "$out/$name-exporter.log"
	wait_http "http://$sim/health" "$out/$name-sim.log"
	echo "== $name: sweep concurrency $levels, $repeats repeats of $duration" >&2
	(
		set -x
		"$bin/gpulens-loadgen" sweep --target "http://$sim/v1" --model gpulens-sim \
			--concurrency "$levels" --repeats "$repeats" --duration "$duration" --warmup "$warmup" \
			--input-tokens fixed:128 --output-tokens fixed:32 --ignore-eos --seed 1 \
			--slo ttft=1s,tpot=60ms --cost.gpu-hourly-usd "$price" \
			--exporter.url "http://$exporter/metrics" --label host="$name" \
			--web.listen-address 127.0.0.1:0 --no-progress \
			--output "$out/$name.json" --csv "$out/$name.csv"
	) 2>"$out/$name-loadgen.log"
	stop_all
}

# An 8B model on one H100: the simulated server's defaults.
host h100 scripts/evaluation-example/h100.yaml "$h100_usd" "$base"
# The same model (FP8 weights, to fit) on an L4-class GPU: about a tenth of
# the H100's memory bandwidth and compute, a smaller batch and KV cache.
host l4 scripts/evaluation-example/l4-like.yaml "$l4_usd" "$((base + 10))" \
	--sim.prefill-per-token=350us --sim.decode-base=30ms --sim.decode-per-seq=500us \
	--sim.max-batch=64 --sim.kv-capacity-tokens=40000

# The rest runs in OUT_DIR, so that the reports are named as their files.
bin=$(realpath "$bin")
cd "$out"
set -x
"$bin/gpulens-loadgen" report h100.json --html h100.html 2>/dev/null
"$bin/gpulens-loadgen" report l4.json --html l4.html 2>/dev/null
"$bin/gpulens-loadgen" cost h100.json --setup-hours 0.5 --retry-hours 0.25 \
	--storage-usd 0.10 --egress-usd 0.05 --billing-increment 1m | tee h100-cost.txt
"$bin/gpulens-loadgen" cost l4.json --setup-hours 0.5 --retry-hours 0.25 \
	--storage-usd 0.10 --egress-usd 0.05 --billing-increment 1m | tee l4-cost.txt
"$bin/gpulens-loadgen" cost h100.json --setup-hours 0.5 --retry-hours 0.25 \
	--storage-usd 0.10 --egress-usd 0.05 --billing-increment 1m --format json >h100-cost.json
"$bin/gpulens-loadgen" compare h100.json l4.json --html compare.html 2>/dev/null | tee compare.txt
"$bin/gpulens-loadgen" compare h100.json l4.json --format json >compare.json 2>/dev/null
set +x

if [ "${EVAL_SCREENSHOTS:-}" = 1 ]; then
	# shot HTML PNG HEIGHT [CSS]: a 1280-pixel-wide screenshot of the page's
	# top, with CSS added to (a copy of) the page.
	shot() {
		local profile page=$1
		profile=$(mktemp -d)
		if [ -n "${4:-}" ]; then
			page=$profile/page.html
			sed "s#</head>#<style>$4</style></head>#" "$1" >"$page"
		fi
		HOME=$profile XDG_CONFIG_HOME=$profile XDG_CACHE_HOME=$profile DISPLAY= chromium --headless --no-sandbox \
			--disable-gpu --no-first-run --disable-background-networking --disable-component-update \
			--disable-sync --disable-dev-shm-usage --user-data-dir="$profile" --hide-scrollbars \
			--window-size=1280,"$3" --screenshot="$2" "file://$(realpath "$page")" 2>/dev/null
		rm -rf "$profile"
	}
	# The report's charts only (two per row, about 360 pixels a row).
	charts=$(grep -c '<figure class="chart"' h100.html)
	shot h100.html report.png $(((charts + 1) / 2 * 362 + 40)) 'body > :not(.grid2) { display: none; }'
	# The comparison's header and charts, without the verdict tables.
	charts=$(grep -c '<figure class="chart"' compare.html)
	shot compare.html compare.png $(((charts + 1) / 2 * 362 + 560)) 'h3, .verdicts, footer { display: none; }'
fi
echo "written in $out: h100.json l4.json h100.html l4.html h100-cost.txt l4-cost.txt compare.txt compare.html" >&2
