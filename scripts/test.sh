#!/usr/bin/env bash
# make test: runs the make targets of SERIAL one after another (what
# compiles: two go commands building the same package at once would each
# compile it), then those of PARTS side by side, each with its output in
# .scratch/test/PART.log. Prints a line per part as it ends (wall and CPU
# time), a failing part's log in full, and a last line naming every part
# that failed. A failure in SERIAL stops there (the parts need its builds);
# every part of PARTS runs to its end. Exit status 1 when anything failed.
# The parts run with BUILT=1 (the Makefile's targets then do not rebuild
# bin/ under each other's feet). The parts of NICE run at a lower CPU
# priority (nice 10): CPU-bound work that waits on no clock yields to the
# tests that run Prometheus against simulated exporters in real time (a
# stalled scrape loop makes TestScenarioAlerts run a scenario again).
# Ctrl-C or SIGTERM stops every part.
# Usage: test.sh "SERIAL TARGETS" "PARTS" ["NICE"]
set -uo pipefail
cd "$(dirname "$0")/.."
if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then
	echo "make test: needs bash 5.1 or later (wait -n -p), this is $BASH_VERSION" >&2
	exit 2
fi

MAKE=${MAKE:-make}
read -r -a serial <<<"${1:-}"
read -r -a parts <<<"${2:-}"
nice_parts=" ${3:-} "
logs=.scratch/test
rm -rf "$logs"
mkdir -p "$logs"
t0=$SECONDS

# result NAME STATUS: the line for a part that ended; its log when it failed.
result() {
	local name=$1 status=$2 wall=? user=? sys=? cpu=?
	[ -s "$logs/$name.time" ] && read -r wall user sys <"$logs/$name.time"
	[ "$user" != ? ] && cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.0f", u + s }')
	if [ "$status" -eq 0 ]; then
		printf 'ok    %-22s %4s s wall %5s s CPU\n' "$name" "${wall%.*}" "$cpu"
	else
		printf -- '--- %s failed (exit %s); its log (%s):\n' "$name" "$status" "$logs/$name.log"
		cat "$logs/$name.log"
		printf 'FAIL  %-22s %4s s wall %5s s CPU\n' "$name" "${wall%.*}" "$cpu"
	fi
}

# part NAME [MAKE ARGS...]: make NAME, timed (bash's time counts the CPU of
# every process it waited for), output into its log; at nice 10 when NAME
# is one of NICE.
part() {
	local name=$1 nice=()
	shift
	[[ $nice_parts == *" $name "* ]] && nice=(nice -n 10)
	(
		TIMEFORMAT='%R %U %S'
		{ time "${nice[@]}" "$MAKE" --no-print-directory "$@" "$name" >"$logs/$name.log" 2>&1; } 2>"$logs/$name.time"
	)
}

# A terminal's Ctrl-C reaches every process of the group (the parts too);
# SIGTERM may reach this shell alone. Either way every part still running
# is stopped, and make test says so and exits 130.
declare -A running=()
stop_parts() {
	trap - INT TERM
	echo "make test: interrupted; stopping ${running[*]}" >&2
	local pid
	for pid in "${!running[@]}"; do kill_tree "$pid"; done
	wait
	exit 130
}
# kill_tree PID: SIGTERM to PID and every process under it (each stopped
# first, so that none exits and orphans its children before they are
# signalled).
kill_tree() {
	local child
	kill -STOP "$1" 2>/dev/null
	for child in $(pgrep -P "$1"); do kill_tree "$child"; done
	kill -TERM "$1" 2>/dev/null
	kill -CONT "$1" 2>/dev/null
}
trap stop_parts INT TERM

# The serial targets, each in the background so that a signal stops it at
# once (bash runs a trap only once a foreground command has ended).
for name in "${serial[@]}"; do
	part "$name" &
	running[$!]=$name
	wait "$!"
	status=$?
	running=()
	result "$name" "$status"
	if [ "$status" -ne 0 ]; then
		echo "make test: FAIL in $name (the checks after it did not run; log: $logs/$name.log)"
		exit 1
	fi
done

echo "make test: running side by side: ${parts[*]} (logs in $logs/)"
for name in "${parts[@]}"; do
	part "$name" BUILT=1 &
	running[$!]=$name
done
failed=()
while [ ${#running[@]} -gt 0 ]; do
	wait -n -p pid
	status=$?
	[ -n "${pid:-}" ] || continue
	name=${running[$pid]}
	unset "running[$pid]"
	result "$name" "$status"
	[ "$status" -eq 0 ] || failed+=("$name")
done
trap - INT TERM

if [ ${#failed[@]} -gt 0 ]; then
	echo "make test: FAIL: ${failed[*]} ($((SECONDS - t0)) s; logs above and in $logs/)"
	exit 1
fi
echo "make test: PASS, $((${#serial[@]} + ${#parts[@]})) parts in $((SECONDS - t0)) s"
