#!/usr/bin/env bash
# Checks the two Go modules: go.mod (the product: what its packages and tests
# import) and tools/go.mod (the pinned tools: the Prometheus server, promtool,
# helm, run as `go tool -modfile=tools/go.mod NAME` from the repository root).
# tools/thanos/go.mod pins Thanos (sidecar, query) in a module of its own: it
# builds against another Prometheus than the server of tools/go.mod, so it
# shares no build with the others and is only checked for tidiness.
#   1. `go mod tidy` leaves the three go.mod and go.sum files unchanged.
#   2. Every module that provides packages to both (the product's packages
#      and tests, and the tools) is at the same version in both, so a build
#      compiles each shared package once and the two share the build cache.
# Usage: check-mod.sh. From an empty module cache, go mod tidy fetches some
# modules the build does not (tests of dependencies), through the same module
# proxy; go.sum being complete, it needs no checksum-database lookup.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

# tools/thanos only with CHECK_MOD_THANOS=1 (make test-thanos): tidying it
# needs the modules of Thanos's whole build graph, which a fresh machine's
# module cache does not hold and make test must not fetch.
dirs=(. tools)
[ "${CHECK_MOD_THANOS:-}" = 1 ] && dirs+=(tools/thanos)
status=0
for dir in "${dirs[@]}"; do
	if ! out=$(cd "$dir" && go mod tidy -diff 2>&1); then
		echo "check-mod: $dir/go.mod or $dir/go.sum is not tidy; run go mod tidy in $dir:"
		echo "$out"
		status=1
	fi
done

format='{{with .Module}}{{.Path}} {{.Version}}{{with .Replace}}=>{{.Path}}@{{.Version}}{{end}}{{end}}'
product=$(go list -e -deps -test -f "$format" ./... | sort -u)
tools=$(cd tools && go list -e -deps -f "$format" tool | sort -u)
shared=$(join <(echo "$product") <(echo "$tools"))
mismatch=$(awk '$2 != $3' <<<"$shared")
if [ -n "$mismatch" ]; then
	echo "check-mod: modules at different versions in go.mod and tools/go.mod (module, product, tools);"
	echo "set each to one version in both (go get MODULE@VERSION, then go mod tidy, in . and in tools):"
	echo "$mismatch"
	status=1
fi
if [ "$status" -eq 0 ]; then
	echo "check-mod: ${dirs[*]/%//go.mod} tidy; $(wc -l <<<"$shared") modules shared at the same version by go.mod and tools/go.mod"
fi
exit "$status"
