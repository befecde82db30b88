package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The client reads through client_golang's v1 API what fleetbench needs,
// and the two fields that API does not decode (a query's samples read, a
// group's evaluation time) from the same answers.
func TestPromClient(t *testing.T) {
	t.Parallel()
	var stats []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		stats = append(stats, r.Form.Get("stats"))
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/rules":
			_, _ = w.Write([]byte(`{"status":"success","data":{"groups":[
{"name":"g1","file":"a.yml","interval":15,"evaluationTime":0.25,"lastEvaluation":"2026-01-01T00:00:00Z","rules":[
 {"type":"recording","name":"r:x","query":"sum(x)","health":"ok","evaluationTime":0.1,"lastEvaluation":"2026-01-01T00:00:00Z"},
 {"type":"alerting","name":"A","query":"r:x > 1","duration":60,"health":"err","lastError":"boom","state":"inactive","alerts":[],"evaluationTime":0.1,"lastEvaluation":"2026-01-01T00:00:00Z"}]},
{"name":"g2","file":"b.yml","interval":60,"evaluationTime":1.5,"lastEvaluation":"2026-01-01T00:00:00Z","rules":[]}]}}`))
		case "/api/v1/query":
			if r.Form.Get("query") == "up" {
				_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"a"},"value":[1,"7"]}]}}`))
				return
			}
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}],
"stats":{"timings":{},"samples":{"totalQueryableSamples":1234,"peakSamples":10}}}}`))
		case "/api/v1/query_range":
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"1"},"values":[[1,"1"],[2,"2"]]}],
"stats":{"timings":{},"samples":{"totalQueryableSamples":99,"peakSamples":10}}}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	p, err := newPromClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	gs, err := p.ruleGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 || gs[0].Name != "g1" || gs[0].Interval != 15 || gs[0].EvaluationTime != 0.25 || gs[1].EvaluationTime != 1.5 ||
		len(gs[0].Rules) != 2 || gs[0].Rules[0].Query != "sum(x)" || gs[0].Rules[1].Health != "err" || gs[0].Rules[1].LastError != "boom" {
		t.Errorf("groups %+v", gs)
	}
	now := time.Unix(1000, 0)
	if r, err := p.instant(ctx, "x", now); err != nil || r.series != 2 || r.samples != 1234 {
		t.Errorf("instant %+v, %v", r, err)
	}
	if r, err := p.rangeQuery(ctx, "x", now.Add(-time.Minute), now, 15*time.Second); err != nil || r.series != 1 || r.samples != 99 {
		t.Errorf("range %+v, %v", r, err)
	}
	if v, err := p.scalar(ctx, "up"); err != nil || v != 7 {
		t.Errorf("scalar %v, %v", v, err)
	}
	if want := []string{"", "all", "all", ""}; len(stats) != 4 || stats[1] != want[1] || stats[2] != want[2] || stats[3] != want[3] {
		t.Errorf("stats asked for %q, want %q", stats, want)
	}
	if _, err := p.instant(ctx, "x", time.Time{}); err != nil {
		t.Error(err)
	}
	bad, _ := newPromClient(srv.URL + "/nothing")
	if _, err := bad.ruleGroups(ctx); err == nil {
		t.Error("no error from a server without the API")
	}
}
