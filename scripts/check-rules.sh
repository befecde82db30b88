#!/usr/bin/env bash
# Checks the Prometheus rule files in alerts/ and runs their unit tests
# (alerts/tests/*.test.yml) with the pinned promtool, RULE_TEST_RUNS times
# (default 3), side by side. promtool evaluates the rule groups in a random order at each
# step, so a rule that reads another group's record passes or fails by luck;
# alerts/doc.go ("Rule order") forbids it and a Go test checks it, and the
# repeats here catch an order dependence that slips past that test (one run
# in three or more failed when host.test.yml had one). Usage: check-rules.sh
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RULE_TEST_RUNS:-3}
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
	echo "check-rules: RULE_TEST_RUNS=$runs is not a positive whole number" >&2
	exit 2
fi

# The pinned promtool, from the tools module (tools/go.mod), built once
# (slow when the cache is cold).
promtool=$(go tool -modfile=tools/go.mod -n promtool)

"$promtool" check rules --lint=all --lint-fatal alerts/*.rules.yml

# The runs side by side (each evaluates the groups in its own random order).
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for i in $(seq 1 "$runs"); do
	"$promtool" test rules alerts/tests/*.test.yml >"$logs/$i.log" 2>&1 &
	pids+=($!)
done
failed=0
for i in $(seq 1 "$runs"); do
	if ! wait "${pids[$((i - 1))]}"; then
		cat "$logs/$i.log"
		echo "check-rules: promtool test rules failed on run $i of $runs" >&2
		failed=$((failed + 1))
	fi
done
if [ "$failed" -gt 0 ]; then
	echo "check-rules: promtool test rules failed $failed times in $runs runs" >&2
	exit 1
fi
echo "check-rules: promtool test rules passed $runs times"
