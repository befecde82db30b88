package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpulens/gpulens/internal/promtext"
)

// promClient talks to one Prometheus's HTTP API and /metrics.
type promClient struct {
	base   string // http://host:port
	client *http.Client
}

func newPromClient(base string) *promClient {
	return &promClient{base: base, client: &http.Client{Timeout: 2 * time.Minute}}
}

func (p *promClient) get(ctx context.Context, path string, params url.Values) ([]byte, error) {
	u := p.base + path
	if params != nil {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.300s", path, resp.Status, body)
	}
	return body, nil
}

// selfMetrics returns the named gauges and counters of Prometheus's own
// /metrics, summed over their label sets.
func (p *promClient) selfMetrics(ctx context.Context, names ...string) (map[string]float64, error) {
	body, err := p.get(ctx, "/metrics", nil)
	if err != nil {
		return nil, err
	}
	families, err := promtext.Parse(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing Prometheus's /metrics: %w", err)
	}
	out := map[string]float64{}
	for _, n := range names {
		mf, ok := families[n]
		if !ok {
			return nil, fmt.Errorf("Prometheus's /metrics has no %s", n)
		}
		for _, m := range mf.GetMetric() {
			if v, ok := promtext.Value(m); ok {
				out[n] += v
			}
		}
	}
	return out, nil
}

// ruleGroup is one group of /api/v1/rules.
type ruleGroup struct {
	Name           string  `json:"name"`
	File           string  `json:"file"`
	Interval       float64 `json:"interval"`
	EvaluationTime float64 `json:"evaluationTime"`
	LastEvaluation string  `json:"lastEvaluation"`
	Rules          []struct {
		Health    string `json:"health"`
		LastError string `json:"lastError"`
		Name      string `json:"name"`
		Query     string `json:"query"`
	} `json:"rules"`
}

// ruleGroups returns every rule group with its last evaluation's duration
// (prometheus_rule_group_last_duration_seconds).
func (p *promClient) ruleGroups(ctx context.Context) ([]ruleGroup, error) {
	body, err := p.get(ctx, "/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Groups []ruleGroup `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding /api/v1/rules: %w", err)
	}
	return r.Data.Groups, nil
}

// queryResult is what a query returned, how long the API took to answer
// and how many samples the engine read (its stats: a measure of the query's
// work that other load on the machine does not change).
type queryResult struct {
	series  int
	samples int64
	elapsed time.Duration
}

// instant runs an instant query at ts.
func (p *promClient) instant(ctx context.Context, expr string, ts time.Time) (queryResult, error) {
	return p.query(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unixSeconds(ts)}, "stats": {"all"}})
}

// rangeQuery runs a range query over [start, end] every step.
func (p *promClient) rangeQuery(ctx context.Context, expr string, start, end time.Time, step time.Duration) (queryResult, error) {
	return p.query(ctx, "/api/v1/query_range", url.Values{
		"query": {expr}, "start": {unixSeconds(start)}, "end": {unixSeconds(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}, "stats": {"all"},
	})
}

func (p *promClient) query(ctx context.Context, path string, params url.Values) (queryResult, error) {
	t0 := time.Now()
	body, err := p.get(ctx, path, params)
	elapsed := time.Since(t0)
	if err != nil {
		return queryResult{}, err
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
			Stats  struct {
				Samples struct {
					TotalQueryableSamples int64 `json:"totalQueryableSamples"`
				} `json:"samples"`
			} `json:"stats"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return queryResult{}, fmt.Errorf("decoding %s: %w", path, err)
	}
	return queryResult{series: len(r.Data.Result), samples: r.Data.Stats.Samples.TotalQueryableSamples, elapsed: elapsed}, nil
}

// scalar runs an instant query that returns one series and returns its value.
func (p *promClient) scalar(ctx context.Context, expr string) (float64, error) {
	body, err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return 0, err
	}
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("decoding query %q: %w", expr, err)
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("query %q: %d series, want 1", expr, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

func unixSeconds(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}
