#!/usr/bin/env bash
# Times a newcomer's first contact, as docs/benchmarks.md#first-contact
# records it: in a fresh clone of this repository's HEAD, with the Go build
# cache GOCACHE_DIR (empty: a cold start),
#   1. `make demo` until it prints that the demo is running, then Ctrl-C
#      (SIGINT to its process group, as a terminal sends it): the demo must
#      say only that it stopped;
#   2. `make test`.
# Prints each phase's wall time and CPU time (user + system of every process
# it waited for, from bash's time), the 1-minute load average before and
# after, and the total. The module cache (GOMODCACHE) is used as it is.
#
# Usage: time-first-contact.sh [--warm] GOCACHE_DIR [CLONE_DIR]
#   GOCACHE_DIR  must be empty or absent unless --warm (then any cache, e.g.
#                $(go env GOCACHE) for the warm figures)
#   CLONE_DIR    where to clone (default: a new temporary folder, removed
#                at the end)
# Environment: DEMO_EXPORTER_ADDR, DEMO_SIM_ADDR, DEMO_LOADGEN_ADDR,
# DEMO_PROMETHEUS_ADDR as for make demo (the defaults are taken when free);
# FIRST_CONTACT_TEST_ARGS, extra arguments for make test (e.g.
# TEST_PARTS=check-ptx to try this script on a small part);
# FIRST_CONTACT_DEMO_TIMEOUT, seconds to wait for the demo (default 3600).
# Exit status: 0 when the demo came up, stopped cleanly and make test
# passed; 1 otherwise; 2 for bad usage.
set -euo pipefail

warm=0
if [ "${1:-}" = --warm ]; then
	warm=1
	shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
fi
cache=$1
if [ "$warm" = 0 ] && [ -d "$cache" ] && [ -n "$(ls -A "$cache")" ]; then
	echo "time-first-contact: GOCACHE_DIR $cache is not empty (a cold start needs an empty one; --warm to time with it anyway)" >&2
	exit 2
fi
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
if [ $# = 2 ]; then
	clone=$2
	[ ! -e "$clone" ] || { echo "time-first-contact: CLONE_DIR $clone already exists" >&2; exit 2; }
	cleanup=0
else
	clone=$(mktemp -d)/gpulens
	cleanup=1
fi
demo_timeout=${FIRST_CONTACT_DEMO_TIMEOUT:-3600}
[[ $demo_timeout =~ ^[1-9][0-9]*$ ]] || { echo "time-first-contact: FIRST_CONTACT_DEMO_TIMEOUT=$demo_timeout is not a number of seconds" >&2; exit 2; }
read -r -a test_args <<<"${FIRST_CONTACT_TEST_ARGS:-}"

export GOCACHE=$cache
load() { cut -d' ' -f1 /proc/loadavg; }
cpu() { awk -v u="$1" -v s="$2" 'BEGIN { printf "%.0f", u + s }'; }

git clone --quiet "$src" "$clone"
cd "$clone"
out=.scratch/first-contact # the logs (.scratch is ignored by git)
mkdir -p "$out"
echo "first contact: $(git log -1 --format='%h %cs') in $clone, GOCACHE=$cache ($( [ $warm = 1 ] && echo as given || echo empty)), $(nproc) CPUs, $(go version | cut -d' ' -f3)"
demo_pid=
stop_demo() { [ -n "$demo_pid" ] && kill -INT -- "-$demo_pid" 2>/dev/null || true; }
trap 'stop_demo; [ $cleanup = 1 ] && rm -rf "$(dirname "$clone")"' EXIT

# ---- 1. make demo, until it is running ----
log=$out/demo.log
load0=$(load)
t0=$SECONDS
# Job control on for this one job: it gets a process group of its own (as a
# terminal's foreground job) and SIGINT is not ignored in it (bash ignores
# SIGINT in background jobs without job control, and a program cannot undo
# that). The subshell outlives the SIGINT (a handler, reset to the default in
# what it starts) to write the time.
set -m
(
	trap : INT
	TIMEFORMAT='%R %U %S'
	{ time make demo >"$log" 2>&1; } 2>"$out/demo.time"
) &
runner=$!
demo_pid=$runner # its process group
set +m
ready=
while [ -z "$ready" ]; do
	if grep -q '^gpulens demo is running' "$log" 2>/dev/null; then
		ready=$((SECONDS - t0))
	elif ! kill -0 "$runner" 2>/dev/null; then
		echo "time-first-contact: make demo ended before it was running; its log:" >&2
		cat "$log" >&2
		exit 1
	elif [ $((SECONDS - t0)) -ge "$demo_timeout" ]; then
		echo "time-first-contact: make demo not running after $demo_timeout s; its log:" >&2
		tail -n 40 "$log" >&2
		exit 1
	else
		sleep 1
	fi
done
stop_demo
make_rc=0
wait "$runner" || make_rc=$?
demo_pid=
read -r _ du ds <"$out/demo.time"
echo "make demo: running after ${ready} s wall, $(cpu "$du" "$ds") s CPU (load ${load0} -> $(load)); Ctrl-C: make exit $make_rc, last line: $(tail -n1 "$log")"
# GNU make re-raises a SIGINT it got once its recipe ended (make demo exits
# 130 whatever the script did); the demo stopped cleanly when its script
# said only that it stopped.
demo_rc=0
if ! tail -n1 "$log" | grep -q '^gpulens demo stopped (logs: ' || grep -q 'a demo process .* exited\|stopped after an error' "$log"; then
	demo_rc=1
	echo "time-first-contact: make demo did not stop cleanly on Ctrl-C; timing make test anyway. The end of its log:" >&2
	tail -n 20 "$log" >&2
fi

# ---- 2. make test ----
load1=$(load)
t1=$SECONDS
test_rc=0
TIMEFORMAT='%R %U %S'
{ time make test "${test_args[@]}" >"$out/test.log" 2>&1; } 2>"$out/test.time" || test_rc=$?
read -r tw tu ts <"$out/test.time"
grep -E '^(ok|FAIL) |^make test:' "$out/test.log" || true
echo "make test: ${tw%.*} s wall, $(cpu "$tu" "$ts") s CPU (load ${load1} -> $(load)), exit $test_rc"
total_cpu=$(cpu "$(awk -v a="$du" -v b="$ds" -v c="$tu" -v d="$ts" 'BEGIN { print a + b + c + d }')" 0)
echo "first contact: demo running after ${ready} s, then make test: $((ready + ${tw%.*})) s wall in all ($(((ready + ${tw%.*}) / 60)) min $(((ready + ${tw%.*}) % 60)) s), $total_cpu s CPU"
if [ "$test_rc" != 0 ] || [ "$demo_rc" != 0 ]; then
	[ "$test_rc" = 0 ] || echo "time-first-contact: make test failed; its log: $clone/$out/test.log (kept)" >&2
	[ "$demo_rc" = 0 ] || echo "time-first-contact: make demo did not exit 0 on Ctrl-C; its log: $clone/$log (kept)" >&2
	cleanup=0
	exit 1
fi
