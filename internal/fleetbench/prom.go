package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gpulens/gpulens/internal/promtext"
)

// promClient talks to one Prometheus: its HTTP API through client_golang's
// client (api/prometheus/v1) and its own /metrics.
type promClient struct {
	base   string // http://host:port
	client *http.Client
	api    api.Client
}

func newPromClient(base string) (*promClient, error) {
	hc := &http.Client{Timeout: 2 * time.Minute}
	c, err := api.NewClient(api.Config{Address: base, Client: hc})
	if err != nil {
		return nil, err
	}
	return &promClient{base: base, client: hc, api: c}, nil
}

// keptBody is client_golang's client keeping the body of its last answer,
// from which the fields its v1 API does not decode are read: a query's
// stats and a rule group's evaluation time. One per call.
type keptBody struct {
	api.Client
	body []byte
}

func (k *keptBody) Do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	resp, body, err := k.Client.Do(ctx, req)
	k.body = body
	return resp, body, err
}

// v1 is the v1 API over a client that keeps its last answer.
func (p *promClient) v1() (promv1.API, *keptBody) {
	k := &keptBody{Client: p.api}
	return promv1.NewAPI(k), k
}

func (p *promClient) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
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
	body, err := p.get(ctx, "/metrics")
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

// ruleGroup is one rule group: its rules (client_golang's), interval and
// the duration of its last evaluation
// (prometheus_rule_group_last_duration_seconds).
type ruleGroup struct {
	Name           string
	Interval       float64
	EvaluationTime float64
	Rules          []groupRule
}

// groupRule is one rule of a group, alerting or recording.
type groupRule struct {
	Name, Query, LastError string
	Health                 promv1.RuleHealth
}

// ruleGroups returns every rule group with its last evaluation's duration.
func (p *promClient) ruleGroups(ctx context.Context) ([]ruleGroup, error) {
	v1, kept := p.v1()
	res, err := v1.Rules(ctx, nil)
	if err != nil {
		return nil, err
	}
	var times struct {
		Data struct {
			Groups []struct {
				EvaluationTime float64 `json:"evaluationTime"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(kept.body, &times); err != nil || len(times.Data.Groups) != len(res.Groups) {
		return nil, fmt.Errorf("the rule groups' evaluation times: %d for %d groups (%v)", len(times.Data.Groups), len(res.Groups), err)
	}
	out := make([]ruleGroup, 0, len(res.Groups))
	for i, g := range res.Groups {
		rg := ruleGroup{Name: g.Name, Interval: g.Interval, EvaluationTime: times.Data.Groups[i].EvaluationTime}
		for _, r := range g.Rules {
			switch r := r.(type) {
			case promv1.AlertingRule:
				rg.Rules = append(rg.Rules, groupRule{Name: r.Name, Query: r.Query, LastError: r.LastError, Health: r.Health})
			case promv1.RecordingRule:
				rg.Rules = append(rg.Rules, groupRule{Name: r.Name, Query: r.Query, LastError: r.LastError, Health: r.Health})
			}
		}
		out = append(out, rg)
	}
	return out, nil
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
	v1, kept := p.v1()
	t0 := time.Now()
	v, _, _, err := v1.Query(ctx, expr, ts, promv1.WithStats(promv1.AllStatsValue))
	return result(v, kept, time.Since(t0), err)
}

// rangeQuery runs a range query over [start, end] every step.
func (p *promClient) rangeQuery(ctx context.Context, expr string, start, end time.Time, step time.Duration) (queryResult, error) {
	v1, kept := p.v1()
	t0 := time.Now()
	v, _, _, err := v1.QueryRange(ctx, expr, promv1.Range{Start: start, End: end, Step: step}, promv1.WithStats(promv1.AllStatsValue))
	return result(v, kept, time.Since(t0), err)
}

// result is a query's result: its series and, from the answer, its stats.
func result(v model.Value, kept *keptBody, elapsed time.Duration, err error) (queryResult, error) {
	if err != nil {
		return queryResult{}, err
	}
	var stats struct {
		Data struct {
			Stats struct {
				Samples struct {
					TotalQueryableSamples int64 `json:"totalQueryableSamples"`
				} `json:"samples"`
			} `json:"stats"`
		} `json:"data"`
	}
	if err := json.Unmarshal(kept.body, &stats); err != nil {
		return queryResult{}, fmt.Errorf("the query's stats: %w", err)
	}
	r := queryResult{samples: stats.Data.Stats.Samples.TotalQueryableSamples, elapsed: elapsed}
	switch v := v.(type) {
	case model.Vector:
		r.series = len(v)
	case model.Matrix:
		r.series = len(v)
	case *model.Scalar, *model.String:
		r.series = 1
	}
	return r, nil
}

// scalar runs an instant query that returns one series and returns its value.
func (p *promClient) scalar(ctx context.Context, expr string) (float64, error) {
	v1, _ := p.v1()
	v, _, _, err := v1.Query(ctx, expr, time.Time{})
	if err != nil {
		return 0, fmt.Errorf("query %q: %w", expr, err)
	}
	vec, ok := v.(model.Vector)
	if !ok || len(vec) != 1 {
		return 0, fmt.Errorf("query %q: %v, want one series", expr, v)
	}
	return float64(vec[0].Value), nil
}
