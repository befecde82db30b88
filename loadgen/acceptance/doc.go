// Package acceptance holds the load generator's acceptance benchmarks: the
// client and runner against the simulator (internal/sim/simserver) running in a
// separate process, measuring TTFT and inter-token-latency error against
// the simulator's own per-request timestamps, client CPU per streamed token,
// open-loop schedule lag and memory per stream. Results and the machine
// they were measured on are in docs/benchmarks.md.
//
//	go test -run '^$' -bench . -benchtime 1x ./loadgen/acceptance/
package acceptance
