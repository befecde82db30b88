# Shared shell helpers for gpulens scripts. Source it; do not run it.

# start_bg LOGFILE CMD...: starts CMD in the background, records its pid in
# the global PIDS array (stopped by stop_all).
PIDS=()
start_bg() {
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	PIDS+=($!)
}

stop_all() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PIDS=()
}

# listen_addr LOGFILE: waits up to 30 s for an exporter-toolkit "Listening on"
# log line and prints the address.
listen_addr() {
	local log=$1 i addr
	for i in $(seq 1 300); do
		addr=$(sed -n 's/.*msg="Listening on" address=\([^ ]*\).*/\1/p' "$log" | head -n1)
		if [ -n "$addr" ]; then
			echo "$addr"
			return 0
		fi
		sleep 0.1
	done
	echo "no 'Listening on' line in $log after 30 s:" >&2
	cat "$log" >&2
	return 1
}
