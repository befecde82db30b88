package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gpulens/gpulens/internal/testenv"
)

// The mixed-fleet scenario's hand computation (its header, and the worked
// example of docs/cost.md): USD per hour.
const mixedFleetSpend = 16.40

var (
	mixedAlloc = map[string]float64{"serving": 5.80, "research": 4.00, "team-a": 1.75, "team-b": 2.35}
	mixedUse   = map[string]float64{"serving": 3.50, "research": 3.05, "team-a": 0.70, "team-b": 1.20}
	// Whole GPUs or MIG GPUs each namespace holds.
	mixedGPUsHeld = map[string]float64{"serving": 3, "research": 2, "team-a": 1, "team-b": 2}
	mixedPodAlloc = map[string]float64{"llm-serve-0": 3.5, "chat-a-0": 1.75, "chat-b-0": 1.75, "embed-0": 1.5,
		"finetune-small-0": 1.0, "notebook-0": 0.5, "train-0": 2.5, "rerank-0": 0.8, "embed-b-0": 0.6}
	mixedPodUse = map[string]float64{"llm-serve-0": 2.10, "chat-a-0": 0.70, "chat-b-0": 1.05, "embed-0": 0.60,
		"finetune-small-0": 0.80, "notebook-0": 0, "train-0": 2.25, "rerank-0": 0.80, "embed-b-0": 0.15}
	mixedPIDUse = map[string]float64{"4100": 2.10, "4200": 0.70, "4300": 1.05, "4400": 0.60, "4500": 0.80,
		"4600": 0, "4700": 2.25, "4800": 0.80, "4900": 0.15}
)

// busyTolerance is the relative error allowed on what depends on a GPU's
// busy rate, rate() of the busy counter over 7.5 s (5 minutes scaled): the
// counter's values lag the scrape by up to the 250 ms sampler interval
// (up to 3.3 % of the window), and a rule evaluation that misses the
// scrape in flight extrapolates the last interval by half (on this
// machine the rates came out 1.5 to 2 % low). The rest is exact.
const busyTolerance = 0.05

// seriesWant is what one query of a panel must return: one series per
// value of the label by ("" for a single series), each within tol
// (relative; 1e-9 for exact figures) of its value; no series for nil vals.
type seriesWant struct {
	by   string
	vals map[string]float64
	tol  float64
}

// TestCostDashboardOnMixedFleet runs the exporter on the mixed-fleet
// scenario, scrapes it and evaluates the shipped rules over the scrapes
// with Prometheus's rule manager (durations scaled 40 times down, as in
// TestScenarioAlerts; scenario_eval_test.go), then evaluates every query of
// the cost dashboard and compares it with the hand computation of the
// scenario's header: prices, allocations, use, idle money, GPU-hours,
// running totals and forecasts. The load generator's panels have no data
// here (dashboards/ tests them on fixtures).
func TestCostDashboardOnMixedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the exporter for about 12 s")
	}
	const k = 40
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	exporterBin := testenv.Binaries(t, "gpulens-exporter")[0]
	rulesDir := filepath.Join(t.TempDir(), "rules")
	if err := os.Mkdir(rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	scaledRules(t, rulesDir, k)
	// 250 ms: the simulated driver has a process sample every 200 ms, and
	// each sampler cycle needs one for the time shares.
	exporter := testenv.Run(t, exporterBin, "--sim.scenario=mixed-fleet", "--sampler.interval=250ms", "--web.listen-address=127.0.0.1:0")
	addr := exporter.MustAddress(ctx, t)

	// Scraped every 375 ms (15 s scaled) as Prometheus scrapes, then the
	// shipped rules evaluated over it by Prometheus's rule manager
	// (scenario_eval_test.go): a Prometheus server running them in real
	// time skipped evaluations on a loaded machine, and the running totals
	// then missed minutes. Scraped until the last 11 s hold 27 scrapes:
	// the windows of the rules' last evaluations, 7.5 s (5 min scaled)
	// before the end, are full (a rate() over a window only partly covered
	// by samples is too low).
	loop := newScrapeLoop(t, 15*time.Second/k, time.Now())
	end := loop.t0.Add(12 * time.Second)
	eng := newEngine(k)
	query := func(expr string, ts time.Time) ([]promSample, error) { return loop.query(ctx, eng, expr, ts) }
	for {
		loop.run(ctx, "mixed", addr, end)
		if ctx.Err() != nil {
			t.Fatalf("scraping the exporter: %v\nexporter:\n%s", ctx.Err(), exporter.Log())
		}
		n, err := query(`min(count_over_time(gpulens_gpu_busy_seconds_total[11s]))`, end)
		if err == nil && len(n) == 1 && n[0].value >= 27 {
			break
		}
		t.Logf("%v scrapes of the busy counters in the last 11 s (%v); scraping on", n, err)
		end = time.Now().Add(2 * time.Second)
	}
	eng = loop.evaluate(ctx, t, rulesDir, 15*time.Second/k, end, k)
	t.Logf("scraped %s, rules evaluated in %s", end.Sub(loop.t0).Round(100*time.Millisecond), time.Since(end).Round(100*time.Millisecond))
	if f, err := query(`cluster:gpulens_cost_month_forecast:usd`, end); err != nil || len(f) != 1 {
		t.Fatalf("no forecast after the rules ran: %v %v", f, err)
	}
	at := end

	value := func(expr string) float64 {
		t.Helper()
		r, err := query(expr, at)
		if err != nil || len(r) != 1 {
			t.Fatalf("%s: %v %v", expr, r, err)
		}
		return r[0].value
	}
	// The running totals count the evaluations of their group (1.5 s here,
	// a minute of scaled time), each adding a minute at 16.40 per hour.
	perEval := mixedFleetSpend / 60
	month := value(`cluster:gpulens_cost_month_to_date:usd`)
	evals := math.Round(month / perEval)
	if evals < 1 || math.Abs(month-evals*perEval) > 1e-9 {
		t.Errorf("spend this month %v is not a whole number of minutes at %v per hour", month, mixedFleetSpend)
	}
	today := value(`cluster:gpulens_cost_today:usd`)
	if d := math.Round(today / perEval); d < 1 || d > evals || math.Abs(today-d*perEval) > 1e-9 {
		t.Errorf("spend today %v: not a whole number of minutes at %v per hour, at most the month's %v", today, mixedFleetSpend, month)
	}
	// The forecast and the month so far come from one evaluation, at T: the
	// rest of the month from T (UTC) at the same rate.
	ts := time.UnixMilli(int64(math.Round(value(`timestamp(cluster:gpulens_cost_month_forecast:usd)`) * 1000))).UTC()
	if mts := value(`timestamp(cluster:gpulens_cost_month_to_date:usd)`); math.Abs(mts-float64(ts.UnixMilli())/1000) > 1e-3 {
		t.Fatalf("the month so far (%v) and the forecast (%v) come from different evaluations", mts, ts)
	}
	daysIn := time.Date(ts.Year(), ts.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
	left := float64((daysIn-ts.Day()+1)*24-ts.Hour()) - float64(ts.Minute())/60
	nsMonth, nsForecast := map[string]float64{}, map[string]float64{}
	for ns, a := range mixedAlloc {
		nsMonth[ns] = evals * a / 60
		nsForecast[ns] = nsMonth[ns] + a*left
	}

	one := func(v float64, tol float64) seriesWant { return seriesWant{vals: map[string]float64{"": v}, tol: tol} }
	exact := 1e-9
	none := seriesWant{}
	panels := map[string][]seriesWant{
		"Spend today":               {one(today, exact)},
		"Spend this month":          {one(month, exact)},
		"Month-end forecast":        {one(month+mixedFleetSpend*left, exact)},
		"Spend per hour":            {one(mixedFleetSpend, exact)},
		"Idle spend per hour":       {one(7.95, busyTolerance)},
		"GPUs without a price":      {one(0, exact)},
		"Spend rate: used and idle": {one(8.45, busyTolerance), one(7.95, busyTolerance), none},
		"Cost per namespace: allocation and use": {
			{by: "namespace", vals: mixedAlloc, tol: exact},
			{by: "namespace", vals: mixedUse, tol: busyTolerance},
			{by: "namespace", vals: nsMonth, tol: exact},
			{by: "namespace", vals: nsForecast, tol: exact},
			{by: "namespace", vals: mixedGPUsHeld, tol: exact},
		},
		"Month-end forecast and budget by namespace": {
			{by: "namespace", vals: nsForecast, tol: exact},
			{by: "namespace", vals: map[string]float64{"example-team": 1000}, tol: exact},
		},
		"Cost per namespace by allocation": {{by: "namespace", vals: mixedAlloc, tol: exact}},
		"Cost per namespace by use":        {{by: "namespace", vals: mixedUse, tol: busyTolerance}},
		"Cost per pod: allocation and use": {
			{by: "pod", vals: mixedPodAlloc, tol: exact},
			{by: "pod", vals: mixedPodUse, tol: busyTolerance},
		},
		"Cost per process by use": {{by: "pid", vals: mixedPIDUse, tol: busyTolerance}},
		"GPU memory held by namespace": {{by: "namespace", tol: exact, vals: map[string]float64{
			"serving": (40000 + 16000 + 20000) << 20, "research": (12000 + 4000 + 60000) << 20,
			"team-a": 20000 << 20, "team-b": (20000 + 8000) << 20}}},
		"Idle spend by GPU model": {{by: "name", tol: busyTolerance, vals: map[string]float64{
			"NVIDIA H100 80GB HBM3": 5.50, "NVIDIA A100-SXM4-80GB": 2.00, "NVIDIA A30-PCIE-24GB": 0.45}}},
		"Idle spend by node":                       {one(7.95, busyTolerance)},
		"Unallocated spend by node":                {one(2.50, exact)},
		"Idle allocated GPUs by namespace":         {none}, // the idle notebook holds a MIG instance
		"Cost of idle allocated GPUs by namespace": {none},
		// $__range is an hour: GPU-hours are the GPU counts.
		"GPU-hours by model in the time range": {{by: "name", tol: exact, vals: map[string]float64{
			"NVIDIA H100 80GB HBM3": 4, "NVIDIA A100-SXM4-80GB": 2, "NVIDIA A30-PCIE-24GB": 1}}},
		"Fleet spend in the time range":          {one(mixedFleetSpend, exact)},
		"Load generator spend in the time range": {none},
		"Spend per hour by GPU model": {{by: "name", tol: exact, vals: map[string]float64{
			"NVIDIA H100 80GB HBM3": 13.0, "NVIDIA A100-SXM4-80GB": 2.8, "NVIDIA A30-PCIE-24GB": 0.6}}},
		"GPUs by model": {
			{by: "name", tol: exact, vals: map[string]float64{"NVIDIA H100 80GB HBM3": 4, "NVIDIA A100-SXM4-80GB": 2, "NVIDIA A30-PCIE-24GB": 1}},
			one(7, exact), one(7, exact),
		},
		// mixed-fleet runs without the probe: no neighbour figures.
		"Neighbours' cost per hour":              {none},
		"Neighbours' cost per day":               {none},
		"Paid vs delivered by namespace":         {none, none, none, none},
		"Neighbours' cost by GPU":                {none},
		"GPU time taken by invisible neighbours": {none},
		"Cost per request":                       {none},
		"Cost per 1,000 requests":                {none},
		"Cost per million output tokens":         {none},
		"Unit costs over time":                   {none, none},
	}

	raw, err := os.ReadFile(filepath.Join("..", "dashboards", "gpulens-cost.json"))
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &board); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range board.Panels {
		if p.Type == "row" {
			continue
		}
		seen[p.Title] = true
		wants, ok := panels[p.Title]
		if !ok {
			t.Errorf("panel %q: no hand-computed value in this test", p.Title)
			continue
		}
		if len(wants) != len(p.Targets) {
			t.Errorf("panel %q: %d queries, the test expects %d", p.Title, len(p.Targets), len(wants))
			continue
		}
		for i, tg := range p.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			got, err := query(expr, at)
			if err != nil {
				t.Errorf("panel %q target %s: %v", p.Title, tg.RefID, err)
				continue
			}
			for _, problem := range wants[i].check(got) {
				t.Errorf("panel %q target %s (%s): %s", p.Title, tg.RefID, expr, problem)
			}
		}
	}
	for title := range panels {
		if !seen[title] {
			t.Errorf("the test expects a panel %q that the cost dashboard does not have", title)
		}
	}
	// Used and idle add up to the spend, exactly.
	if sum := value(`sum(namespace:gpulens_use_cost:usd_per_hour) + sum(gpu:gpulens_gpu_idle_cost:usd_per_hour)`); math.Abs(sum-mixedFleetSpend) > 1e-9 {
		t.Errorf("use + idle = %v, want the spend %v", sum, mixedFleetSpend)
	}
	if sum := value(`sum(pod:gpulens_allocation_cost:usd_per_hour) + sum(gpu:gpulens_gpu_unallocated_cost:usd_per_hour)`); math.Abs(sum-mixedFleetSpend) > 1e-9 {
		t.Errorf("allocation + unallocated = %v, want the spend %v", sum, mixedFleetSpend)
	}
	if r, err := query(`ALERTS{alertname="GpulensNamespaceCostForecastOverBudget"}`, at); err != nil || len(r) != 0 {
		t.Errorf("budget alert %v %v: no namespace of mixed-fleet has a budget", r, err)
	}
}

// grafanaVars writes the dashboard variables as Grafana would with every
// filter on All and an hour's time range.
var grafanaVars = strings.NewReplacer(
	"$__range_s", "3600", "$__range", "1h", "$__rate_interval", "1m",
	"$cluster", ".*", "$namespace", ".*", "$target", ".*", "$model", ".*",
)

func (w seriesWant) check(got []promSample) []string {
	var problems []string
	if w.vals == nil {
		if len(got) > 0 {
			problems = append(problems, fmt.Sprintf("%d series, want none: %v", len(got), got))
		}
		return problems
	}
	byKey := map[string]float64{}
	for _, s := range got {
		k := ""
		if w.by != "" {
			k = s.metric[w.by]
		}
		if _, dup := byKey[k]; dup {
			problems = append(problems, fmt.Sprintf("two series with %s=%q", w.by, k))
		}
		byKey[k] = s.value
	}
	keys := make([]string, 0, len(w.vals))
	for k := range w.vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := w.vals[k]
		v, ok := byKey[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("no series %s=%q (want %v); got %v", w.by, k, want, byKey))
		case math.Abs(v-want) > w.tol*math.Max(math.Abs(want), 0.01):
			problems = append(problems, fmt.Sprintf("%s=%q: %v, want %v (within %g)", w.by, k, v, want, w.tol))
		}
	}
	if len(byKey) != len(w.vals) {
		problems = append(problems, fmt.Sprintf("%d series, want %d: %v", len(byKey), len(w.vals), byKey))
	}
	return problems
}

// promSample is one sample of an instant query's result.
type promSample struct {
	metric map[string]string
	value  float64
}

func (s promSample) String() string { return fmt.Sprintf("%v %v", s.metric, s.value) }

// promQuery runs an instant query at ts against the Prometheus at addr.
func promQuery(ctx context.Context, addr, expr string, ts time.Time) ([]promSample, error) {
	c, err := api.NewClient(api.Config{Address: "http://" + addr})
	if err != nil {
		return nil, err
	}
	v, _, _, err := promv1.NewAPI(c).Query(ctx, expr, ts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", expr, err)
	}
	switch v := v.(type) {
	case *model.Scalar:
		return []promSample{{metric: map[string]string{}, value: float64(v.Value)}}, nil
	case model.Vector:
		out := make([]promSample, 0, len(v))
		for _, s := range v {
			m := make(map[string]string, len(s.Metric))
			for k, l := range s.Metric {
				m[string(k)] = string(l)
			}
			out = append(out, promSample{metric: m, value: float64(s.Value)})
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: result type %q", expr, v.Type())
}
