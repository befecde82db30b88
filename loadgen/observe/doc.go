// Package observe records what a campaign observes besides its own
// requests: the GPUs, through a gpulens exporter, and the inference
// server's own metrics.
//
// A Poller (exporterpoll.go) polls a gpulens exporter's /metrics during a
// campaign and records the GPUs serving the model: their facts (model,
// driver, CUDA, MIG profile) for the report's metadata (Info), and, per
// run, a window of samples (Begin … End) summarised as the run's GPU side:
// peak memory per GPU and summed, mean utilisation and power, and the
// energy the GPUs used (the increase of their energy counters over the
// window).
//
// A Recorder (servermetrics.go) turns scrapes of an inference server's own
// Prometheus metrics while a run lasts into report.ServerMetrics: KV-cache
// usage, running and waiting requests, preemptions and the prefix-cache
// hit ratio, under one set of names whatever the server (vLLM, SGLang,
// TGI; docs/loadgen.md, "The server's own metrics"), and a timeline; a
// Scraper (scraper.go) drives a Recorder over HTTP every interval.
// Scraping never fails a run: what went wrong is recorded in
// ServerMetrics.Error.
package observe
