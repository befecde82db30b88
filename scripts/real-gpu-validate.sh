#!/usr/bin/env bash
# make real-gpu-validate: the real-GPU validation experiment (docs/real-gpu.md).
# On one GPU, phase by phase, it compares three views of contention:
#   host view    gpulens-exporter: sharing mode, contention ratio, time shares
#   tenant view  gpulens-verify (one more CUDA context): stolen time, FLOP/s
#   reference    nvidia-smi pmon and --query-compute-apps (the driver's own)
# Phases: idle 20 s; one bounded GPU workload 30 s; two workloads in two
# processes 40 s (about 2 minutes in all, 8 at most). The workload is a torch
# bf16 matmul loop when python3 has torch with CUDA, else
# `gpulens-verify burn` (the probe's FMA kernel). Every scrape, report and
# nvidia-smi output is written under the output folder, with summary.md: a
# markdown table (phase -> host view -> tenant view -> driver reference) to
# paste into docs/real-gpu.md. It never changes GPU state (MIG, clocks, ECC,
# persistence), never resets the GPU, and bounds every process it starts in
# time (killed past its phase's end, which fails the run).
#
# On a GPU machine without Go, pass prebuilt binaries (built with cgo):
#   GPULENS_EXPORTER=path/to/gpulens-exporter GPULENS_VERIFY=path/to/gpulens-verify \
#     bash scripts/real-gpu-validate.sh
# Settings (environment):
#   VALIDATE_OUT       output folder (default docs/real-gpu/validation; --sim:
#                      .scratch/real-gpu-validate-sim)
#   VALIDATE_GPU       the GPU: NVML index and CUDA ordinal (CUDA_DEVICE_ORDER is
#                      set to PCI_BUS_ID so they agree), default 0
#   VALIDATE_WORKLOAD  auto (default), torch or burn
#   VALIDATE_MEMORY    device memory each workload holds, default 2GiB
#   VALIDATE_PHASES    the three phase lengths in seconds, default "20 30 40"
#   GPULENS_BIN        folder of the binaries when GPULENS_EXPORTER/GPULENS_VERIFY
#                      are not set (default bin; built with go when missing)
#   NVIDIA_SMI         the nvidia-smi to run (default nvidia-smi)
#
# --sim runs the same experiment on the simulated fleet (scenario validate:
# one H100 whose phases last 60 s of simulated time each), with a canned
# nvidia-smi; it asserts every expected value (make test). There no phase
# is bound to the wall clock: each phase starts its own exporter, workloads
# and gpulens-verify, each with a --sim.start that puts it 2 s into its
# phase, and ends when they are done, so a program slowed down by a busy
# machine still sees its phase for 58 s; gpulens-verify and the workloads
# are waited for up to 50 s each (killed past that, which fails the run).
# On a real GPU it asserts only what must hold on any host and records the
# rest; see docs/real-gpu.md. Exit status: 0 pass, 1 a check failed, 2 bad
# setup.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
mode=real
case "${1:-}" in
"") ;;
--sim) mode=sim ;;
-h | --help) usage; exit 0 ;;
*) echo "real-gpu-validate: unknown argument ${1} (use --sim or nothing)" >&2; exit 2 ;;
esac
die() { echo "real-gpu-validate: $*" >&2; exit 2; }
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }

# ---- settings ----
GPU=${VALIDATE_GPU:-0}
[[ $GPU =~ ^[0-9]+$ ]] || die "VALIDATE_GPU must be a GPU index, got '$GPU'"
MEMORY=${VALIDATE_MEMORY:-2GiB}
WORKLOAD=${VALIDATE_WORKLOAD:-auto}
case $WORKLOAD in auto | torch | burn) ;; *) die "VALIDATE_WORKLOAD must be auto, torch or burn, got '$WORKLOAD'" ;; esac
SMI=${NVIDIA_SMI:-nvidia-smi}
export CUDA_DEVICE_ORDER=PCI_BUS_ID
if [ $mode = sim ]; then
	OUT=${VALIDATE_OUT:-.scratch/real-gpu-validate-sim}
	# Fixed by internal/sim/gpusim/scenarios/validate.yaml: idle in
	# [0, 60 s), workload-1 alone in [60 s, 120 s), both workloads in
	# [120 s, 180 s) of simulated time. Each program of a phase is started
	# SIM_LEAD s into its phase (its own --sim.start, taken as it starts):
	# the exporter's first sampler cycle looks one interval back, and so
	# sees only the phase's samples; and each program sees its phase's
	# tenants for the 58 s that follow, however slowly it runs. The phase
	# ends when its programs are done; gpulens-verify and the workloads are
	# waited for up to SIM_WAIT s each (under SIM_LEN - SIM_LEAD, so a
	# program that ends in time has seen nothing but its phase). A phase
	# took 2-4 s at load ~10 on 2 cores, 6-14 s at load 14-16.
	read -r -a PHASES <<<"60 60 60"
	SIM_PHASE_START=(0 60 120) SIM_LEN=60 SIM_LEAD=2 SIM_WAIT=50
	# The host scrapes three times 0.25 s apart as soon as the exporter
	# serves (its first cycle already read the phase).
	SAMPLER=500ms SCRAPE_EVERY=0.25 HOST_SCRAPES=3
	SIM_ARGS=(--sim.scenario=validate)
	VERIFY_ARGS=(--repeat=3 --interval=0s --probe.budget=200ms --probe.stolen-window=100ms)
	WORKLOAD=burn
else
	OUT=${VALIDATE_OUT:-docs/real-gpu/validation}
	read -r -a PHASES <<<"${VALIDATE_PHASES:-20 30 40}"
	[ ${#PHASES[@]} = 3 ] || die "VALIDATE_PHASES must be three lengths in seconds, got '${VALIDATE_PHASES:-}'"
	total=0
	for p in "${PHASES[@]}"; do
		[[ $p =~ ^[0-9]+$ ]] && [ "$p" -ge 15 ] || die "VALIDATE_PHASES: each phase must be a whole number of seconds, at least 15, got '$p'"
		total=$((total + p))
	done
	[ $total -le 420 ] || die "VALIDATE_PHASES add up to ${total} s; at most 420 s keep the run within 8 minutes"
	SAMPLER=1s SCRAPE_EVERY=1 HOST_SCRAPES=5 SETTLE=2 MAX_SETTLE=20 GRACE=10
	SIM_ARGS=()
	VERIFY_ARGS=(--repeat=3 --interval=1s)
	[ -z "${CUDA_VISIBLE_DEVICES+x}" ] || echo "real-gpu-validate: warning: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES renumbers CUDA devices; VALIDATE_GPU=$GPU is used as both NVML index and CUDA ordinal" >&2
	command -v "$SMI" >/dev/null || die "$SMI not found: this needs a machine with the NVIDIA driver (or --sim)"
fi
PHASE_NAMES=(idle one two)
if [ $mode = sim ]; then UNIT="s simulated"; else UNIT=s; fi
PHASE_TITLES=("idle" "one workload" "two workloads")

# ---- binaries ----
work=$(mktemp -d)
cleanup() {
	stop_all
	rm -rf "$work"
}
trap cleanup EXIT
bindir=${GPULENS_BIN:-bin}
exporter=${GPULENS_EXPORTER:-$bindir/gpulens-exporter}
verify=${GPULENS_VERIFY:-$bindir/gpulens-verify}
if [ ! -x "$exporter" ] || [ ! -x "$verify" ]; then
	if [ -n "${GPULENS_EXPORTER:-}${GPULENS_VERIFY:-}" ] || ! command -v go >/dev/null; then
		die "no binaries: set GPULENS_EXPORTER and GPULENS_VERIFY (built with cgo on a machine with Go), or run make build"
	fi
	log "building gpulens-exporter and gpulens-verify"
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -o "$work/" ./cmd/gpulens-exporter ./cmd/gpulens-verify
	exporter=$work/gpulens-exporter verify=$work/gpulens-verify
fi

# ---- output ----
mkdir -p "$OUT"
for n in 1 2 3; do rm -rf "$OUT/$n-${PHASE_NAMES[n - 1]}"; done
rm -f "$OUT"/summary.md "$OUT"/environment.txt "$OUT"/gpu-state-*.csv "$OUT"/exporter.log "$OUT"/run.log
exec > >(tee "$OUT/run.log") 2>&1

# ---- time ----
now() { date +%s.%N; }
# until T: seconds from now until Unix time T (0 when past).
until_t() { awk -v t="$1" -v n="$(now)" 'BEGIN { d = t - n; printf "%.3f", (d > 0 ? d : 0) }'; }
sleep_until() { sleep "$(until_t "$1")"; }
add() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }
before() { awk -v t="$1" -v n="$(now)" 'BEGIN { exit !(n < t) }'; }

# ---- nvidia-smi, or its canned stand-in on the simulated fleet ----
SIM_PIDS="" # the simulated workloads NVML lists now: "pid:sm% ..."
sim_smi() {
	local a
	for a in "$@"; do
		case $a in
		pmon)
			local count=1 i p
			while [ $# -gt 0 ]; do
				if [ "$1" = -c ]; then count=$2; fi
				shift
			done
			echo "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command "
			echo "# Idx           #    C/G      %      %      %      %      %      %     MB     MB    name "
			for ((i = 0; i < count; i++)); do
				if [ -z "$SIM_PIDS" ]; then
					printf '%5s %11s %6s %6s %6s %6s %6s %6s %6s %6s %6s    %s\n' "$GPU" - - - - - - - - - - -
				fi
				for p in $SIM_PIDS; do
					printf '%5s %11s %6s %6s %6s %6s %6s %6s %6s %6s %6s    %s\n' "$GPU" "${p%%:*}" C "${p##*:}" 30 - - - - 2560 0 gpulens-verify
				done
				sleep 0.5
			done
			return 0
			;;
		--query-compute-apps=*)
			for p in $SIM_PIDS; do echo "${p%%:*}, gpulens-verify, 2560"; done
			return 0
			;;
		--query-gpu=*)
			echo "$GPU, NVIDIA H100 80GB HBM3 (simulated), Disabled, Default, Enabled, Enabled, 700.00 W"
			return 0
			;;
		-L)
			echo "GPU $GPU: NVIDIA H100 80GB HBM3 (simulated fleet, scenario validate; this nvidia-smi is canned)"
			return 0
			;;
		esac
	done
	echo "simulated nvidia-smi (canned by scripts/real-gpu-validate.sh --sim)"
}
smi() { if [ $mode = sim ]; then sim_smi "$@"; else "$SMI" "$@"; fi; }
GPU_STATE_QUERY=index,name,mig.mode.current,compute_mode,persistence_mode,ecc.mode.current,power.limit
gpu_state() { smi -i "$GPU" --query-gpu=$GPU_STATE_QUERY --format=csv,noheader 2>&1 || true; }

# ---- scrapes and JSON ----
fetch() { # URL FILE
	if command -v curl >/dev/null; then
		curl -fsS --max-time 5 "$1" >"$2"
	else
		python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=5).read())' "$1" >"$2"
	fi
}
SCRAPES=0 SCRAPES_UP=0
scrape() { # FILE
	SCRAPES=$((SCRAPES + 1))
	if fetch "http://$addr/metrics" "$1" 2>>"$EXPORTER_LOG" && grep -q "^gpulens_gpu_up{gpu=\"$GPU\",.*} 1$" "$1"; then
		SCRAPES_UP=$((SCRAPES_UP + 1))
	fi
}
# metric FILE NAME: the GPU's value of a per-GPU series (empty when absent).
metric() { sed -n "s/^$2{gpu=\"$GPU\",[^}]*} \(.*\)/\1/p" "$1" | head -n1; }
# sharing_mode FILE: the mode whose one-hot series is 1.
sharing_mode() { sed -n "s/^gpulens_gpu_sharing_mode{gpu=\"$GPU\",mode=\"\([a-z_]*\)\".*} 1$/\1/p" "$1" | head -n1; }
# per_pid FILE NAME: "pid value" for each process series of the GPU.
per_pid() { grep "^$2{" "$1" | grep "gpu=\"$GPU\"" | sed -n 's/.*pid="\([0-9a-z]*\)".*} \(.*\)$/\1 \2/p' || true; }
# json_stat FILE KEY FIELD: FIELD of the last object "KEY": {...}.
json_stat() {
	awk -v key="\"$2\": {" -v f="\"$3\":" '
		index($0, key) { in_obj = 1; next }
		in_obj && index($0, f) { v = $0; sub(/.*": */, "", v); sub(/,$/, "", v); last = v; in_obj = 0 }
		in_obj && /}/ { in_obj = 0 }
		END { if (last != "") print last }' "$1" 2>/dev/null || true # no report: empty, and the check below says so
}
# json_num FILE KEY: the first scalar "KEY": value.
json_num() { grep -o "\"$2\": *[^,}]*" "$1" 2>/dev/null | head -n1 | sed 's/^[^:]*: *//; s/"//g' || true; }
fmt() { awk -v v="$1" -v f="$2" 'BEGIN { if (v == "") print "–"; else printf f, v }'; }
pct() { fmt "$(awk -v v="$1" 'BEGIN { if (v != "") print 100 * v }')" "%.1f %%"; }

# ---- checks ----
FAILS=0
CHECKS=()
# check hard|expect DESCRIPTION COMMAND...: hard failures fail the run; on a
# real GPU expectations are recorded only (sim mode makes every check hard).
check() {
	local kind=$1 what=$2
	shift 2
	if "$@"; then
		CHECKS+=("ok: $what")
	elif [ "$kind" = hard ] || [ $mode = sim ]; then
		CHECKS+=("FAIL: $what")
		FAILS=$((FAILS + 1))
	else
		CHECKS+=("differs: $what")
	fi
}
# verify_ended RC REPORT EXIT: gpulens-verify exited 0 or 1 (not killed, not
# bad input), wrote REPORT, and the report's exit_code is RC.
verify_ended() { [[ $1 =~ ^[01]$ ]] && [ -s "$2" ] && [ "$3" = "$1" ]; }
between() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v != "" && v + 0 >= lo && v + 0 <= hi) }'; }

# ---- workloads ----
hold_bytes=$(awk -v s="$MEMORY" 'BEGIN {
	if (s == "0") { print 0; exit }
	if (match(s, /^[0-9.]+/) == 0) exit 1
	v = substr(s, 1, RLENGTH); u = tolower(substr(s, RLENGTH + 1))
	m["gib"] = 2^30; m["mib"] = 2^20; m["gb"] = 1e9; m["mb"] = 1e6
	if (!(u in m)) exit 1
	printf "%.0f", v * m[u] }') || die "VALIDATE_MEMORY must be like 2GiB, 512MiB or 0, got '$MEMORY'"
if [ "$WORKLOAD" = auto ]; then
	WORKLOAD=burn
	if command -v python3 >/dev/null && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		WORKLOAD=torch
	fi
fi
TORCH_WORKLOAD='
import json, os, sys, time
import torch
deadline, index, hold = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dev = torch.device("cuda", index)
held = torch.empty(hold, dtype=torch.uint8, device=dev)
held.fill_(1)
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize(dev)
start, done = time.time(), 0
while time.time() < deadline:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize(dev)
    done += 10
el = time.time() - start
print(json.dumps({"pid": os.getpid(), "workload": "torch bf16 matmul 8192^3", "matmuls": done,
                  "seconds": el, "bf16_flops": 2 * n**3 * done / el if el > 0 else 0,
                  "memory_bytes": hold, "torch": torch.__version__}))
'
# start_timed LOG CMD...: start_bg, and the start time of the process
# (STARTED, for reap's "killed after").
declare -A STARTED
start_timed() {
	start_bg "$@"
	STARTED[${PIDS[-1]}]=$(now)
}
# forget PID: drops a process that has ended from PIDS (stop_all then
# signals no PID the system may have given to another process).
forget() {
	local p keep=()
	for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}
# sim_start I: on the simulated fleet, SIM set to the --sim.* flags of a
# program of phase I started now: its sim time is SIM_LEAD s into the phase
# (validate.yaml's times). On a real GPU, SIM is empty.
SIM=()
sim_start() {
	SIM=()
	[ $mode = sim ] || return 0
	SIM=("${SIM_ARGS[@]}" --sim.start="$(add "$(now)" "-$((SIM_PHASE_START[$1] + SIM_LEAD))")")
}
WL_PIDS=()
# start_workload DIR N END I: workload N of phase I, to end by Unix time
# END (on the simulated fleet the burn runs 1 s of the simulated driver's
# virtual clock, and returns at once).
start_workload() {
	local dir=$1 n=$2 end=$3 secs
	sim_start "$4"
	secs=$(awk -v e="$end" -v n="$(now)" 'BEGIN { d = int(e - n); print (d > 1 ? d : 1) }')
	if [ $mode = sim ]; then secs=1; fi
	if [ "$WORKLOAD" = torch ]; then
		start_timed "$dir/workload-$n.log" python3 -c "$TORCH_WORKLOAD" "$end" "$GPU" "$hold_bytes"
	else
		start_timed "$dir/workload-$n.log" "$verify" burn --device="$GPU" --duration="${secs}s" --memory="$MEMORY" \
			--output.json="$dir/workload-$n.json" "${SIM[@]}"
	fi
	WL_PIDS+=("${PIDS[-1]}")
}
# reap PID DEADLINE: waits for PID until Unix time DEADLINE, then kills it;
# prints its exit status, or "killed after N s" (from its start) when it
# overran: never 0, so the checks on it fail.
reap() {
	local pid=$1 deadline=$2 rc
	while kill -0 "$pid" 2>/dev/null && before "$deadline"; do sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		awk -v s="${STARTED[$pid]:-}" -v n="$(now)" 'BEGIN { if (s == "") print "killed"; else printf "killed after %.1f s\n", n - s }'
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		forget "$pid"
		return
	fi
	rc=0
	wait "$pid" 2>/dev/null || rc=$?
	forget "$pid"
	echo "$rc"
}

# ---- environment ----
log "== real-gpu-validate ($mode): GPU $GPU, workload $WORKLOAD, phases ${PHASES[*]} $UNIT, output $OUT"
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "mode: $mode"
	echo "gpu: $GPU"
	echo "workload: $WORKLOAD (memory $MEMORY)"
	echo "phases: ${PHASES[*]} $UNIT"
	echo "exporter: $("$exporter" --version 2>&1 | head -n1)"
	echo "verify: $("$verify" --version 2>&1 | head -n1)"
	if [ "$WORKLOAD" = torch ]; then echo "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1)"; fi
	echo "uname: $(uname -srm)"
	echo
	smi -L 2>&1 || true
	echo
	smi 2>&1 || true
} >"$OUT/environment.txt"
gpu_state >"$OUT/gpu-state-before.csv"
smi -i "$GPU" --query-compute-apps=pid,process_name,used_gpu_memory --format=csv,noheader,nounits >"$OUT/compute-apps-before.csv" 2>&1 || true
if [ $mode = real ] && [ -s "$OUT/compute-apps-before.csv" ]; then
	log "warning: processes already use GPU $GPU (compute-apps-before.csv): they will show in every phase"
fi

# ---- the exporter ----
# start_exporter LOG I: starts gpulens-exporter (for phase I on the
# simulated fleet) and waits until it serves GPU $GPU; sets addr,
# exporter_pid, exporter_t0 (its start) and EXPORTER_LOG.
start_exporter() {
	EXPORTER_LOG=$1
	sim_start "$2"
	start_timed "$EXPORTER_LOG" "$exporter" --web.listen-address=127.0.0.1:0 --sampler.interval=$SAMPLER "${SIM[@]}"
	exporter_pid=${PIDS[-1]} exporter_t0=${STARTED[${PIDS[-1]}]}
	addr=$(listen_addr "$EXPORTER_LOG") || die "the exporter did not start (see $EXPORTER_LOG)"
	rm -f "$work/first.prom"
	for _ in $(seq 1 100); do
		if fetch "http://$addr/metrics" "$work/first.prom" 2>/dev/null && grep -q "^gpulens_gpu_up{gpu=\"$GPU\"," "$work/first.prom"; then break; fi
		sleep 0.2
	done
	grep -q "^gpulens_gpu_up{gpu=\"$GPU\"," "$work/first.prom" 2>/dev/null || die "the exporter at $addr serves no GPU $GPU (see $EXPORTER_LOG)"
}
# On a real GPU one exporter watches every phase; on the simulated fleet
# each phase starts its own (below), in its phase's simulated time.
if [ $mode = real ]; then
	start_exporter "$OUT/exporter.log" 0
	T0=$(add "$(now)" 1)
fi

# ---- phases ----
# On a real GPU the phases follow the clock: phase i runs from start_t to
# end_t, and whatever runs past its end is killed. On the simulated fleet
# each phase runs until its programs are done (see SIM_WAIT).
offset=0
declare -A ROLE # pid -> what it is
declare -A HOST_LATE # phase -> seconds from its exporter's start to the end of the host view (sim)
for i in 0 1 2; do
	k=$i len=${PHASES[i]}
	name=$((i + 1))-${PHASE_NAMES[i]}
	dir=$OUT/$name
	mkdir -p "$dir"
	if [ $mode = real ]; then
		start_t=$(add "$T0" "$offset") end_t=$(add "$T0" $((offset + len)))
		offset=$((offset + len))
		sleep_until "$start_t"
		log "== phase $name: $k workload(s), ${len} s"
	else
		log "== phase $name: $k workload(s), sim time [${SIM_PHASE_START[i]} s, $((SIM_PHASE_START[i] + SIM_LEN)) s)"
		start_exporter "$dir/exporter.log" "$i"
		start_t=$(now) end_t=""
	fi
	SIM_PIDS=""
	if [ $mode = sim ]; then
		case $k in 1) SIM_PIDS="4101:97" ;; 2) SIM_PIDS="4101:48 4102:48" ;; esac
	fi
	WL_PIDS=()
	for ((w = 1; w <= k; w++)); do
		start_workload "$dir" "$w" "$(add "${end_t:-$start_t}" -1)" "$i"
		ROLE[${WL_PIDS[-1]}]="workload $w"
	done
	if [ $mode = sim ]; then
		for p in $SIM_PIDS; do ROLE[${p%%:*}]="workload (simulated)"; done
	fi
	# nvidia-smi itself (not the smi function's subshell), so that reap
	# ends it; the canned one prints 3 samples.
	if [ $mode = sim ]; then pmon_cmd=(sim_smi) pmon_n=3; else pmon_cmd=("$SMI") pmon_n=$((len - 2)); fi
	start_timed "$dir/pmon.txt" "${pmon_cmd[@]}" pmon -i "$GPU" -s um -d 1 -c $pmon_n
	pmon_pid=${PIDS[-1]}

	# Settle (real GPU): the workloads start and NVML samples them. Leave
	# 18 s for the host view and the probe.
	n=0
	if [ $mode = real ]; then
		settle_end=$(add "$start_t" "$((MAX_SETTLE < len - 18 ? MAX_SETTLE : len - 18))")
		sleep_until "$(add "$start_t" "$SETTLE")"
		while [ "$k" -gt 0 ] && before "$settle_end"; do
			n=$((n + 1))
			scrape "$dir/settle-$(printf %02d $n).prom"
			active=$(metric "$dir/settle-$(printf %02d $n).prom" gpulens_gpu_active_processes)
			[ "${active:-0}" -ge "$k" ] 2>/dev/null && break
			sleep "$SCRAPE_EVERY"
		done
	fi
	[ $n = 0 ] || sleep "$SCRAPE_EVERY" # one more sampler interval

	# The host's view, the probe not running.
	for ((s = 1; s <= HOST_SCRAPES; s++)); do
		scrape "$dir/host-$(printf %02d $s).prom"
		[ $s = "$HOST_SCRAPES" ] || sleep "$SCRAPE_EVERY"
	done
	if [ $mode = sim ]; then HOST_LATE[$i]=$(add "$(now)" "-$exporter_t0"); fi
	smi -i "$GPU" --query-compute-apps=pid,process_name,used_gpu_memory --format=csv,noheader,nounits >"$dir/compute-apps.csv" 2>&1 || true

	# The tenant's view: gpulens-verify, one more CUDA context; the exporter
	# keeps scraping (the probe is one more process to the host) while it
	# runs (on the simulated fleet: while the exporter still sees the phase).
	sim_start "$i"
	start_timed "$dir/verify.txt" "$verify" --devices="$GPU" --output.json="$dir/verify.json" --output.html="$dir/verify.html" \
		"${VERIFY_ARGS[@]}" "${SIM[@]}"
	verify_pid=${PIDS[-1]}
	ROLE[$verify_pid]="probe (gpulens-verify)"
	if [ $mode = real ]; then
		scrape_until=$(add "$end_t" -0.5) verify_until=$(add "$end_t" -0.3)
	else
		verify_until=$(add "${STARTED[$verify_pid]}" "$SIM_WAIT")
		scrape_until=$(add "$exporter_t0" $((SIM_LEN - SIM_LEAD)))
	fi
	s=0
	while kill -0 "$verify_pid" 2>/dev/null && before "$scrape_until" && before "$verify_until"; do
		s=$((s + 1))
		scrape "$dir/probe-$(printf %02d $s).prom"
		sleep "$SCRAPE_EVERY"
	done
	reap "$verify_pid" "$verify_until" >"$dir/verify.rc"
	if [ $mode = real ]; then sleep_until "$end_t"; fi
	for ((w = 1; w <= k; w++)); do
		wpid=${WL_PIDS[w - 1]}
		if [ $mode = real ]; then until_w=$(add "$end_t" "$GRACE"); else until_w=$(add "${STARTED[$wpid]}" "$SIM_WAIT"); fi
		reap "$wpid" "$until_w" >"$dir/workload-$w.rc"
		if [ "$WORKLOAD" = torch ]; then tail -n1 "$dir/workload-$w.log" >"$dir/workload-$w.json"; fi
	done
	if [ $mode = real ]; then
		reap "$pmon_pid" "$(now)" >/dev/null
	else
		reap "$pmon_pid" "$(add "${STARTED[$pmon_pid]}" "$SIM_WAIT")" >/dev/null
		# The phase's exporter: stopped, as it did its part.
		reap "$exporter_pid" "$(now)" >/dev/null
		log "   phase $name took $(add "$(now)" "-$start_t") s"
	fi
done
gpu_state >"$OUT/gpu-state-after.csv"
stop_all

# ---- the views, per phase ----
# host_view DIR: the summary of the phase's host scrapes: HOST_MODES (each
# scrape's sharing mode), HOST_MODE (the most frequent), HOST_CONTENTION
# (the mean ratio) and, from the last scrape, HOST_ACTIVE, HOST_SHARES
# ("pid share ...") and HOST_MEM ("pid bytes ...").
host_view() {
	local dir=$1 f m modes="" c sum=0 cn=0
	HOST_ACTIVE="" HOST_SHARES="" HOST_MEM=""
	for f in "$dir"/host-*.prom; do
		m=$(sharing_mode "$f")
		modes+="${m:-none} "
		c=$(metric "$f" gpulens_gpu_contention_ratio)
		if [ -n "$c" ]; then sum=$(add "$sum" "$c") cn=$((cn + 1)); fi
		HOST_ACTIVE=$(metric "$f" gpulens_gpu_active_processes)
		HOST_SHARES=$(per_pid "$f" gpulens_process_gpu_time_share_ratio | tr '\n' ' ')
		HOST_MEM=$(per_pid "$f" gpulens_process_memory_used_bytes | tr '\n' ' ')
	done
	HOST_MODES=$modes
	HOST_MODE=$(echo "$modes" | tr ' ' '\n' | awk 'NF' | sort | uniq -c | sort -rn | awk 'NR == 1 { print $2 }')
	HOST_CONTENTION=""
	if [ $cn -gt 0 ]; then HOST_CONTENTION=$(awk -v s="$sum" -v n=$cn 'BEGIN { printf "%.3f", s / n }'); fi
}
# mode_counts "MODE MODE ...": "idle ×2, exclusive ×1".
mode_counts() { echo "$1" | tr ' ' '\n' | awk 'NF' | sort | uniq -c | sort -rn | awk '{ printf "%s%s ×%d", (NR > 1 ? ", " : ""), $2, $1 }'; }
# probe_host_view DIR: the modes the host saw while the probe ran.
probe_host_view() {
	local f out=""
	for f in "$1"/probe-*.prom; do
		[ -e "$f" ] || continue
		out+="$(sharing_mode "$f") "
	done
	mode_counts "$out"
}
# pmon_view FILE: "pid mean_sm samples fb_max" per process pmon listed.
pmon_view() {
	awk '
		/^# *gpu/ { sub(/^# */, ""); for (i = 1; i <= NF; i++) col[$i] = i; next }
		/^#/ || NF == 0 { next }
		col["pid"] && $col["pid"] ~ /^[0-9]+$/ {
			p = $col["pid"]; n[p]++
			if (col["sm"] && $col["sm"] ~ /^[0-9]+$/) { sm[p] += $col["sm"]; smn[p]++ }
			if (col["fb"] && $col["fb"] ~ /^[0-9]+$/ && $col["fb"] > fb[p]) fb[p] = $col["fb"]
		}
		END { for (p in n) printf "%s %s %d %s\n", p, (smn[p] ? sm[p] / smn[p] : "-"), n[p], (p in fb ? fb[p] : "-") }' "$1" 2>/dev/null | sort -n
}
role() { echo "${ROLE[$1]:-other}"; }
# pairs: "a 1 b 2" -> one "a 1" per line.
pairs() { awk '{ for (i = 1; i < NF; i += 2) print $i, $(i + 1) }'; }
pids_of() { awk -F '[ ,]+' '$1 ~ /^[0-9]+$/ { print $1 }' | sort -n | tr '\n' ' ' | sed 's/ $//'; }

TABLE=()
WORKLOAD_ROWS=()
EXPECT_MODE=(idle exclusive time_sliced)
for i in 0 1 2; do
	k=$i
	name=$((i + 1))-${PHASE_NAMES[i]}
	dir=$OUT/$name
	title="${PHASE_TITLES[i]}, ${PHASES[i]} $UNIT"

	host_view "$dir"
	shares_txt=$(echo "$HOST_SHARES" | pairs | while read -r p v; do printf '%s %s: share %.2f; ' "$(role "$p")" "$p" "$v"; done)
	mem_txt=$(echo "$HOST_MEM" | pairs | while read -r p v; do awk -v p="$p" -v v="$v" 'BEGIN { printf "%s %.0f MiB; ", p, v / 1048576 }'; done)
	during=$(probe_host_view "$dir")
	host_cell="**$(fmt "$HOST_MODE" %s)** ($(mode_counts "$HOST_MODES")), contention $(fmt "$HOST_CONTENTION" %.2f), $(fmt "$HOST_ACTIVE" %s) active"
	[ -z "$shares_txt" ] || host_cell+="; ${shares_txt%; }"
	[ -z "$mem_txt" ] || host_cell+="; memory ${mem_txt%; }"
	[ -z "$during" ] || host_cell+="; while the probe ran: $during"

	vj=$dir/verify.json
	stolen=$(json_stat "$vj" stolen_ratio median)
	stolen_min=$(json_stat "$vj" stolen_ratio min)
	stolen_max=$(json_stat "$vj" stolen_ratio max)
	unexplained=$(json_stat "$vj" unexplained_stolen_ratio median)
	gap=$(json_stat "$vj" stolen_gap_median_seconds median)
	fp32=$(json_stat "$vj" fp32_flops median)
	nprocs=$(json_stat "$vj" processes count)
	vrc=$(cat "$dir/verify.rc" 2>/dev/null || echo missing)
	if [ -s "$vj" ]; then
		tenant_cell="stolen **$(pct "$stolen")** ($(pct "$stolen_min")–$(pct "$stolen_max")), gaps $(fmt "$(awk -v g="$gap" 'BEGIN { if (g != "") print g * 1000 }')" "%.2f ms"), FP32 $(fmt "$(awk -v f="$fp32" 'BEGIN { if (f != "") print f / 1e12 }')" "%.1f TFLOP/s"); NVML shows it $(fmt "$nprocs" %s) other process(es); exit $vrc"
	else
		tenant_cell="no report (exit $vrc; see $name/verify.txt)"
	fi

	pmon=$(pmon_view "$dir/pmon.txt")
	ref_cell=""
	if [ -n "$pmon" ]; then
		ref_cell="pmon: $(echo "$pmon" | while read -r p sm n fb; do printf '%s %s SM %s %% (%s samples), %s MiB; ' "$(role "$p")" "$p" "$(fmt "$sm" %.0f)" "$n" "$fb"; done)"
		ref_cell=${ref_cell%; }
	else
		ref_cell="pmon: no process"
	fi
	apps=$(grep -E '^[0-9]+' "$dir/compute-apps.csv" 2>/dev/null | awk -F', *' '{ printf "%s (%s, %s MiB); ", $1, $2, $3 }' || true)
	ref_cell+="; compute-apps: $(if [ -n "$apps" ]; then echo "${apps%; }"; else echo none; fi)"
	TABLE+=("| $((i + 1)). $title | $host_cell | $tenant_cell | $ref_cell |")

	# Workloads: their own view.
	for ((w = 1; w <= k; w++)); do
		wj=$dir/workload-$w.json
		wrc=$(cat "$dir/workload-$w.rc" 2>/dev/null || echo missing)
		if [ "$WORKLOAD" = torch ]; then
			wtxt="torch pid $(json_num "$wj" pid): $(fmt "$(json_num "$wj" seconds)" "%.1f s"), $(fmt "$(awk -v f="$(json_num "$wj" bf16_flops)" 'BEGIN { if (f != "") print f / 1e12 }')" "%.0f TFLOP/s BF16")"
		else
			wtxt="burn pid $(json_num "$wj" pid): $(fmt "$(awk -v d="$(json_num "$wj" duration_ns)" 'BEGIN { if (d != "") print d / 1e9 }')" "%.1f s"), $(json_num "$wj" launches) launches, $(fmt "$(awk -v f="$(json_num "$wj" fp32_flops)" 'BEGIN { if (f != "") print f / 1e12 }')" "%.1f TFLOP/s FP32")"
		fi
		WORKLOAD_ROWS+=("| $((i + 1)). ${PHASE_TITLES[i]} | $w | $wtxt | $wrc |")
		check hard "phase $name: workload $w ended within its bound and exited 0 (exit $wrc)" test "$wrc" = 0
		if [ "$WORKLOAD" = burn ]; then
			check hard "phase $name: workload $w ran (launches $(json_num "$wj" launches))" between "$(json_num "$wj" launches)" 1 1e12
		fi
	done

	# Checks.
	# gpulens-verify: it ended by itself (not killed, no bad input) and its
	# report says the exit status it gave; on the simulated fleet every
	# check of its own passes (exit 0), on a real GPU a failed one is a
	# finding, recorded.
	vexit=$(json_num "$vj" exit_code)
	check hard "phase $name: gpulens-verify ended by itself and wrote its report, with the same exit status (exit $vrc, report ${vexit:-none})" \
		verify_ended "$vrc" "$vj" "$vexit"
	check expect "phase $name: gpulens-verify exited 0 (exit $vrc)" test "$vrc" = 0
	if [ $mode = sim ]; then
		check hard "phase $name: the host view was taken in the phase's simulated time ($(fmt "${HOST_LATE[$i]}" %.1f) s after the exporter started, which sees the phase for $((SIM_LEN - SIM_LEAD)) s)" \
			between "${HOST_LATE[$i]}" 0 $((SIM_LEN - SIM_LEAD))
	fi
	check expect "phase $name: sharing mode ${EXPECT_MODE[i]} in every host scrape (saw $(mode_counts "$HOST_MODES"))" \
		test "$(echo "$HOST_MODES" | tr ' ' '\n' | awk 'NF' | sort -u | tr -d '\n')" = "${EXPECT_MODE[i]}"
	nshares=$(echo "$HOST_SHARES" | pairs | awk 'END { print NR }')
	pids_host=$(echo "$HOST_SHARES" | pairs | pids_of)
	pids_ref=$(pids_of <"$dir/compute-apps.csv" 2>/dev/null || true)
	case $k in
	0)
		check expect "phase $name: contention $(fmt "$HOST_CONTENTION" %.2f) ≈ 0" between "$HOST_CONTENTION" 0 0.05
		check expect "phase $name: no active process (saw ${HOST_ACTIVE:-none})" between "$HOST_ACTIVE" 0 0
		check expect "phase $name: stolen $(pct "$stolen") ≈ 0 (≤ 5 %)" between "$stolen" 0 0.05
		;;
	1)
		check expect "phase $name: contention $(fmt "$HOST_CONTENTION" %.2f) ≈ 0" between "$HOST_CONTENTION" 0 0.05
		check expect "phase $name: one active process (saw ${HOST_ACTIVE:-none})" between "$HOST_ACTIVE" 1 1
		check expect "phase $name: the workload's time share ≈ 1 (saw ${HOST_SHARES% })" \
			awk -v s="$HOST_SHARES" 'BEGIN { n = split(s, a, " "); exit !(n == 2 && a[2] >= 0.95) }'
		if [ $mode = sim ]; then
			check expect "phase $name: stolen $(pct "$stolen") ≈ 50 % (the probe takes turns with one workload)" between "$stolen" 0.4 0.6
		else
			check expect "phase $name: stolen $(pct "$stolen") large (≥ 20 %: the probe takes turns with the workload)" between "$stolen" 0.2 1
		fi
		;;
	2)
		if [ $mode = sim ]; then lo=0.9 slo=0.4 shi=0.6; else lo=0.5 slo=0.3 shi=0.7; fi
		check expect "phase $name: contention $(fmt "$HOST_CONTENTION" %.2f) ≈ 1 (≥ $lo)" between "$HOST_CONTENTION" "$lo" 1
		check expect "phase $name: two active processes (saw ${HOST_ACTIVE:-none})" between "$HOST_ACTIVE" 2 2
		check expect "phase $name: two time shares ≈ ½ each ($slo–$shi; saw ${HOST_SHARES% })" \
			awk -v s="$HOST_SHARES" -v lo="$slo" -v hi="$shi" 'BEGIN { n = split(s, a, " "); exit !(n == 4 && a[2] >= lo && a[2] <= hi && a[4] >= lo && a[4] <= hi) }'
		if [ $mode = sim ]; then
			check expect "phase $name: stolen $(pct "$stolen") ≈ ⅔ (a third context)" between "$stolen" 0.55 0.75
		else
			check expect "phase $name: stolen $(pct "$stolen") large (≥ 40 %: a third context)" between "$stolen" 0.4 1
		fi
		;;
	esac
	# The workloads are processes NVML shows: they explain the stolen time.
	if [ $mode = sim ]; then uhi=0.05; else uhi=0.15; fi
	check expect "phase $name: unexplained stolen $(pct "$unexplained") ≈ 0 (≤ $(pct "$uhi"): the processes NVML shows explain the rest)" between "$unexplained" 0 "$uhi"
	if [ "$k" -gt 0 ]; then
		check expect "phase $name: the host view's processes ($pids_host) are the ones nvidia-smi lists ($pids_ref)" \
			test "$nshares" = "$k" -a "$pids_host" = "$pids_ref"
	fi
done
check hard "every scrape served GPU $GPU up ($SCRAPES_UP of $SCRAPES)" test "$SCRAPES_UP" = "$SCRAPES" -a "$SCRAPES" -gt 0
# On the simulated fleet nvidia-smi is canned and every process has its
# own fleet: nothing could change, so nothing is checked.
if [ $mode = real ]; then
	check hard "GPU state unchanged ($GPU_STATE_QUERY)" cmp -s "$OUT/gpu-state-before.csv" "$OUT/gpu-state-after.csv"
fi

# ---- summary.md ----
gpu_name=$(cut -d, -f2 "$OUT/gpu-state-before.csv" | head -n1 | sed 's/^ *//')
{
	if [ $mode = sim ]; then
		echo "### Validation run on the simulated fleet (scenario validate), $(date -u +%Y-%m-%d)"
	else
		echo "### Validation run: GPU $GPU, ${gpu_name:-unknown}, $(date -u +%Y-%m-%d)"
	fi
	echo
	echo "Workload: $WORKLOAD, $MEMORY held each; phases ${PHASES[*]} $UNIT. Host view: the exporter's scrapes before the probe ran (sharing mode per scrape, mean contention ratio, the last scrape's time shares and memory). Tenant view: gpulens-verify --repeat=3 (median stolen time, min–max, gap median, FP32). Driver reference: nvidia-smi pmon (mean SM % per process over the phase) and --query-compute-apps."
	[ $mode = real ] || echo "The simulated nvidia-smi is canned from the scenario; the burn processes stand in for the scenario's tenants, which are the workloads NVML shows."
	echo
	echo "| Phase | Host view (gpulens-exporter) | Tenant view (gpulens-verify) | Driver reference (nvidia-smi) |"
	echo "|---|---|---|---|"
	printf '%s\n' "${TABLE[@]}"
	echo
	echo "| Phase | Workload | Its own view | Exit |"
	echo "|---|---|---|---|"
	printf '%s\n' "${WORKLOAD_ROWS[@]}"
	echo
	echo "Checks (FAIL fails the run; \"differs\" is recorded only, on a real GPU):"
	echo
	printf -- '- %s\n' "${CHECKS[@]}"
} >"$OUT/summary.md"
echo
cat "$OUT/summary.md"
echo
if [ $FAILS = 0 ]; then
	log "real-gpu-validate ($mode): PASS; everything is under $OUT"
	exit 0
fi
log "real-gpu-validate ($mode): FAIL ($FAILS checks); everything is under $OUT"
exit 1
