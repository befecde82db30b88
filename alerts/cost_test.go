package alerts

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/util/teststorage"
)

// totalsRecords are the running-total rules of group gpulens-cost.
var totalsRecords = map[string]bool{
	"cluster:gpulens_cost_today:usd":            true,
	"cluster:gpulens_cost_month_to_date:usd":    true,
	"namespace:gpulens_cost_month_to_date:usd":  true,
	"cluster:gpulens_cost_month_forecast:usd":   true,
	"namespace:gpulens_cost_month_forecast:usd": true,
	"gpulens:cost_day_of_month:number":          true,
}

// totalsEnv evaluates the running-total rules (of group gpulens-cost)
// minute by minute at chosen UTC times, as a Prometheus would, with the
// hourly rates they add fed as input series. promtool cannot: its tests
// start on 1 January 1970 and a month of minutes takes it minutes.
type totalsEnv struct {
	t     *testing.T
	st    *teststorage.TestStorage
	eng   *promql.Engine
	rules []rulefmt.Rule
}

// Hourly rates the totals add: the fleet at 6 USD/h (0.10 a minute), namespace
// a at 3 USD/h (0.05 a minute).
const (
	fleetRate = 6.0
	nsRate    = 3.0
)

func newTotalsEnv(t *testing.T) *totalsEnv {
	t.Helper()
	groups, errs := rulefmt.ParseFile("gpulens-cost.rules.yml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	e := &totalsEnv{t: t, st: teststorage.New(t), eng: promqltest.NewTestEngineWithOpts(t, promql.EngineOpts{
		MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
	})}
	for _, g := range groups.Groups {
		if g.Name != "gpulens-cost" {
			continue
		}
		if time.Duration(g.Interval) != time.Minute {
			t.Fatalf("group %s runs every %s; its totals add a minute each", g.Name, g.Interval)
		}
		for _, r := range g.Rules {
			if totalsRecords[r.Record] {
				e.rules = append(e.rules, r)
			}
		}
	}
	if len(e.rules) != len(totalsRecords) {
		t.Fatalf("group gpulens-cost has %d of the %d running-total rules", len(e.rules), len(totalsRecords))
	}
	return e
}

// evaluate appends the input rates at ts and evaluates the group's rules in
// order, as a rule group does once a minute.
func (e *totalsEnv) evaluate(ts time.Time) {
	e.t.Helper()
	ctx := context.Background()
	app := e.st.Appender(ctx)
	for _, in := range []struct {
		ls labels.Labels
		v  float64
	}{
		{labels.FromStrings("__name__", "cluster:gpulens_gpus_cost:usd_per_hour", "cluster", "c"), fleetRate},
		{labels.FromStrings("__name__", "namespace:gpulens_allocated_gpus_cost:usd_per_hour", "cluster", "c", "namespace", "a"), nsRate},
	} {
		if _, err := app.Append(0, in.ls, ts.UnixMilli(), in.v); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range e.rules {
		vec := e.query(r.Expr, ts)
		app := e.st.Appender(ctx)
		for _, s := range vec {
			lb := labels.NewBuilder(s.Metric)
			lb.Set(labels.MetricName, r.Record)
			for k, v := range r.Labels {
				lb.Set(k, v)
			}
			if _, err := app.Append(0, lb.Labels(), ts.UnixMilli(), s.F); err != nil {
				e.t.Fatalf("%s: %v", r.Record, err)
			}
		}
		if err := app.Commit(); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *totalsEnv) query(expr string, ts time.Time) promql.Vector {
	e.t.Helper()
	q, err := e.eng.NewInstantQuery(context.Background(), e.st, nil, expr, ts)
	if err != nil {
		e.t.Fatalf("%s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		e.t.Fatalf("%s: %v", expr, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		e.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// value is the single value of expr at ts.
func (e *totalsEnv) value(expr string, ts time.Time) float64 {
	e.t.Helper()
	v := e.query(expr, ts)
	if len(v) != 1 {
		e.t.Fatalf("%s at %s: %d samples, want 1: %v", expr, ts.Format(time.RFC3339), len(v), v)
	}
	return v[0].F
}

// run evaluates every minute from from to to, inclusive.
func (e *totalsEnv) run(from, to time.Time) {
	for ts := from; !ts.After(to); ts = ts.Add(time.Minute) {
		e.evaluate(ts)
	}
}

func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestCostTotalsRollOver: today's total starts again when the UTC day
// changes, the month's when the month does; a gap in the evaluations
// shorter than a day keeps the totals (without the gap's spend), a longer
// one starts them again; the forecast is the month so far plus the rate
// until the month's end.
func TestCostTotalsRollOver(t *testing.T) {
	const perMin = fleetRate / 60
	check := func(e *totalsEnv, at string, today, month, nsMonth float64) {
		t.Helper()
		ts := utc(at)
		for _, c := range []struct {
			expr string
			want float64
		}{
			{"cluster:gpulens_cost_today:usd", today},
			{"cluster:gpulens_cost_month_to_date:usd", month},
			{`namespace:gpulens_cost_month_to_date:usd{namespace="a"}`, nsMonth},
		} {
			if got := e.value(c.expr, ts); math.Abs(got-c.want) > 1e-9 {
				t.Errorf("%s at %s = %v, want %v", c.expr, at, got, c.want)
			}
		}
	}

	t.Run("day and month change", func(t *testing.T) {
		e := newTotalsEnv(t)
		// 30 January 23:55 to 31 January 00:05: a new day, the same month.
		e.run(utc("2026-01-30 23:55"), utc("2026-01-31 00:05"))
		check(e, "2026-01-30 23:59", 5*perMin, 5*perMin, 5*nsRate/60)
		check(e, "2026-01-31 00:00", perMin, 6*perMin, 6*nsRate/60)
		check(e, "2026-01-31 00:05", 6*perMin, 11*perMin, 11*nsRate/60)
		// Then 00:06 to 00:10, a gap of 23 hours 39 minutes (less than a
		// day: the totals hold, the gap's spend is not counted), and 31
		// January 23:50 to 1 February 00:10.
		e.run(utc("2026-01-31 00:06"), utc("2026-01-31 00:10"))
		e.run(utc("2026-01-31 23:50"), utc("2026-02-01 00:10"))
		// Today: 00:00 to 00:10 and 23:50 to 23:59, 21 minutes; the month
		// also has 5 minutes of the 30th.
		check(e, "2026-01-31 23:59", 21*perMin, 26*perMin, 26*nsRate/60)
		check(e, "2026-02-01 00:00", perMin, perMin, nsRate/60)
		check(e, "2026-02-01 00:10", 11*perMin, 11*perMin, 11*nsRate/60)
		// The forecast: the month so far plus the last day's mean rate for
		// the 28 × 24 hours less 10 minutes left of February.
		left := 28*24 - 10.0/60
		if got, want := e.value("cluster:gpulens_cost_month_forecast:usd", utc("2026-02-01 00:10")), 11*perMin+fleetRate*left; math.Abs(got-want) > 1e-9 {
			t.Errorf("fleet forecast %v, want %v", got, want)
		}
		if got, want := e.value(`namespace:gpulens_cost_month_forecast:usd{namespace="a"}`, utc("2026-02-01 00:10")), 11*nsRate/60+nsRate*left; math.Abs(got-want) > 1e-9 {
			t.Errorf("namespace forecast %v, want %v", got, want)
		}
	})

	t.Run("gap longer than a day", func(t *testing.T) {
		e := newTotalsEnv(t)
		e.run(utc("2026-03-10 12:00"), utc("2026-03-10 12:09"))
		check(e, "2026-03-10 12:09", 10*perMin, 10*perMin, 10*nsRate/60)
		// Back a day and a minute after the last evaluation: from 0.
		e.run(utc("2026-03-11 12:10"), utc("2026-03-11 12:12"))
		check(e, "2026-03-11 12:12", 3*perMin, 3*perMin, 3*nsRate/60)
	})
}
