#!/usr/bin/env bash
# Checks the Prometheus rule files in alerts/ and runs their unit tests
# (alerts/tests/*.test.yml) with the pinned promtool. Usage: check-rules.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Build the pinned promtool once (slow when the cache is cold).
go tool -n promtool >/dev/null

go tool promtool check rules --lint=all --lint-fatal alerts/*.rules.yml
go tool promtool test rules alerts/tests/*.test.yml
