package report

// ServerMetrics summarises the inference server's own Prometheus metrics
// scraped during one level and repeat (Run.ServerMetrics).
type ServerMetrics struct {
	// URL is the scraped /metrics URL, without credentials; Flavor the
	// server kind recognised from the metric names ("vllm", "tgi",
	// "sglang", or "" when none was).
	URL     string `json:"url"`
	Flavor  string `json:"flavor,omitempty"`
	Samples int    `json:"samples"`
	// Series maps a normalised name to its summary over the run. Names:
	// "kv_cache_usage_ratio", "requests_running", "requests_waiting"
	// (gauges: mean, max, last), "preemptions" (a counter: Increase) and
	// "prefix_cache_hit_ratio" (the share of prompt tokens served from the
	// prefix cache: Mean over the run, Max and Last per scrape interval).
	Series map[string]SeriesSummary `json:"series,omitempty"`
	Error  string                   `json:"error,omitempty"`
	// Timeline holds every scrape, in order (the HTML report's timeline).
	Timeline []ServerSample `json:"timeline,omitempty"`
}

// SeriesSummary is one server metric over a run.
type SeriesSummary struct {
	// Source is the server's own metric name it came from.
	Source   string  `json:"source"`
	Mean     float64 `json:"mean"`
	Max      float64 `json:"max"`
	Last     float64 `json:"last"`
	Increase float64 `json:"increase,omitempty"`
}
