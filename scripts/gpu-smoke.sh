#!/usr/bin/env bash
# make gpu-smoke: runs gpulens-exporter against the real NVML library on a
# machine with the NVIDIA driver and checks that the metrics are present and
# sane. Starts a short GPU workload when python3 with torch is available. It
# never changes GPU settings (no MIG change, no reset, no clocks).
#
# On a machine without Go, build here and pass the binaries:
#   GPULENS_EXPORTER=path/to/gpulens-exporter PROMTOOL=path/to/promtool
# (`make tools` builds the pinned promtool into bin/)
# (PROMTOOL=none skips that check: run promtool on the kept scrape instead).
# SMOKE_OUT=DIR keeps the scrape and the logs in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

if ! command -v nvidia-smi >/dev/null; then
	echo "gpu-smoke: nvidia-smi not found: this target needs a machine with the NVIDIA driver" >&2
	exit 2
fi
work=$(mktemp -d)
keep() { if [ -n "${SMOKE_OUT:-}" ]; then cp -f "$work"/*.prom "$work"/*.log "$SMOKE_OUT"/ 2>/dev/null || true; fi; }
trap 'stop_all; keep; rm -rf "$work"' EXIT

echo "== nvidia-smi"
nvidia-smi --query-gpu=index,uuid,name,memory.total,power.draw,driver_version --format=csv
exporter=${GPULENS_EXPORTER:-}
if [ -z "$exporter" ]; then
	exporter=$work/gpulens-exporter
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -o "$exporter" ./cmd/gpulens-exporter
fi
promtool=(go tool -modfile=tools/go.mod promtool)
if [ -n "${PROMTOOL:-}" ]; then promtool=("$PROMTOOL"); fi
"$exporter" --version 2>&1 | head -n1

workload_pid=""
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	echo "== starting a 40 s torch matmul workload on GPU 0"
	python3 - >"$work/workload.log" 2>&1 <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
keep = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # hold 4 GiB
end = time.time() + 40
while time.time() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
print("workload done")
PY
	workload_pid=$!
	PIDS+=("$workload_pid")
	sleep 8 # let it allocate and start
else
	echo "== python3 with torch not found: checking an idle GPU"
fi

start_bg "$work/exporter.log" "$exporter" --web.listen-address=127.0.0.1:0 --sampler.interval=500ms
addr=$(listen_addr "$work/exporter.log")
sleep 4
if command -v curl >/dev/null; then
	curl -fsS "http://$addr/metrics" >"$work/scrape.prom"
else
	python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1]).read())' "http://$addr/metrics" >"$work/scrape.prom"
fi
echo "== exporter log"
cat "$work/exporter.log"
echo "== scrape: $(grep -vc '^#' "$work/scrape.prom") samples; selected series"
grep -E '^gpulens_(gpu_(up|info|memory_total_bytes|memory_used_bytes|utilization_ratio|power_watts|temperature_celsius|busy_seconds_total|energy_joules_total|sm_activity_ratio)|gpm_supported|process_memory_used_bytes|process_sm_utilization_ratio|nvml_errors_total)' "$work/scrape.prom" | cut -c1-240

fail=0
check() { # description, command...
	local what=$1
	shift
	if "$@"; then echo "ok:   $what"; else echo "FAIL: $what"; fail=1; fi
}
value() { # metric name, gpu index
	sed -n "s/^$1{[^}]*gpu=\"$2\"[^}]*} \(.*\)/\1/p" "$work/scrape.prom" | head -n1
}
count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
check "$count GPUs up" test "$(grep -c '^gpulens_gpu_up{.*} 1$' "$work/scrape.prom")" = "$count"
for i in $(seq 0 $((count - 1))); do
	smi_mib=$(nvidia-smi -i "$i" --query-gpu=memory.total --format=csv,noheader,nounits | tr -d ' ')
	ours=$(value gpulens_gpu_memory_total_bytes "$i")
	check "GPU $i memory total $ours bytes = nvidia-smi ${smi_mib} MiB" awk -v a="$ours" -v b="$smi_mib" 'BEGIN { exit !(a > 0 && (a / 1048576 - b) < 1 && (b - a / 1048576) < 1) }'
	p=$(value gpulens_gpu_power_watts "$i")
	check "GPU $i power $p W > 0" awk -v p="$p" 'BEGIN { exit !(p > 0) }'
	tmp=$(value gpulens_gpu_temperature_celsius "$i")
	check "GPU $i temperature $tmp °C within 10–100" awk -v t="$tmp" 'BEGIN { exit !(t >= 10 && t <= 100) }'
	check "GPU $i info carries driver and CUDA versions" grep -q "^gpulens_gpu_info{.*cuda_driver_version=\"[0-9]" "$work/scrape.prom"
	if nvidia-smi -i "$i" --query-gpu=name --format=csv,noheader | grep -qE 'H100|H200|H20|GH200|B200|B100'; then
		check "GPU $i (Hopper or newer) has GPM: gpm_supported 1" test "$(value gpulens_gpm_supported "$i")" = 1
		check "GPU $i has GPM SM activity" grep -qE "^gpulens_gpu_sm_activity_ratio\{[^}]*gpu=\"$i\"" "$work/scrape.prom"
	fi
done
if [ -n "$workload_pid" ]; then
	u=$(value gpulens_gpu_utilization_ratio 0)
	check "GPU 0 utilisation $u > 0.3 under the torch workload" awk -v u="$u" 'BEGIN { exit !(u > 0.3) }'
	if grep -q '^gpulens_process_memory_used_bytes' "$work/scrape.prom"; then
		check "the workload appears as a process on GPU 0 with its memory" grep -qE "^gpulens_process_memory_used_bytes\{.*gpu=\"0\".*pid=\"$workload_pid\".*\} [0-9.e+]+" "$work/scrape.prom"
		check "the workload's process name is python3" grep -qE "^gpulens_process_memory_used_bytes\{.*pid=\"$workload_pid\".*process_name=\"python3?\"" "$work/scrape.prom"
		check "the workload has SM utilisation" grep -qE "^gpulens_process_sm_utilization_ratio\{.*pid=\"$workload_pid\".*\} 0\.[1-9]|^gpulens_process_sm_utilization_ratio\{.*pid=\"$workload_pid\".*\} 1$" "$work/scrape.prom"
	fi
fi
if [ "${PROMTOOL:-}" = none ]; then
	echo "skipped: promtool check metrics (PROMTOOL=none)"
else
	check "promtool check metrics is clean" bash -c '"${@:2}" check metrics <"$1"' _ "$work/scrape.prom" "${promtool[@]}"
fi
if [ $fail = 0 ]; then echo "gpu-smoke: PASS"; else echo "gpu-smoke: FAIL"; fi
exit $fail
