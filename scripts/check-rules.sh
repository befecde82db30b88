#!/usr/bin/env bash
# Checks the Prometheus rule files in alerts/ and runs their unit tests
# (alerts/tests/*.test.yml) with the pinned promtool. Usage: check-rules.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# The pinned promtool, from the tools module (tools/go.mod).
promtool=(go tool -modfile=tools/go.mod promtool)
# Build it once (slow when the cache is cold).
go tool -modfile=tools/go.mod -n promtool >/dev/null

"${promtool[@]}" check rules --lint=all --lint-fatal alerts/*.rules.yml
"${promtool[@]}" test rules alerts/tests/*.test.yml
