package alerts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/util/teststorage"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// The scenario test's Prometheus, in two halves that no stall of the test
// machine can make disagree with a Prometheus on a quiet one.
//
// While the scenarios run, scrapeLoop scrapes each exporter every scaled
// interval as Prometheus's scrape loop does (the text format parsed by
// Prometheus's own parser, target labels job, instance and cluster with
// honor_labels false, up, a stale marker for every series a scrape no
// longer has and for all of them when a scrape fails) into a TSDB, each
// sample at the wall time its scrape began. Its timeout is generous (a
// loaded machine delays an answer; it does not make the exporter wrong),
// and a tick it misses is skipped, as Prometheus skips it.
//
// After the run, evaluateRules runs the scaled rule groups over that TSDB
// with Prometheus's rule manager and PromQL engine (what promtool test
// rules runs), every group at each multiple of its interval from sim time
// zero, writing records and ALERTS back as a Prometheus server does. The
// real-time server this replaces skipped evaluations whenever the machine
// stalled it for a second (40 s of sim time at 40x): ALERTS then had a gap
// that split an episode, and scenarios failed on machines busy with other
// work. What is left to a busy machine is what a real node would see too:
// scrapes that fail or come late, and an exporter whose own readings lag.
type scrapeLoop struct {
	st                *teststorage.TestStorage
	interval, timeout time.Duration
	t0                time.Time

	mu sync.Mutex
	// failed, slow and gaps are what the machine got wrong, by cluster,
	// in wall time: scrapes that failed, scrapes answered after more than
	// an interval (Prometheus, its timeout the interval, would have failed
	// them: the exporter was starved of CPU, and its readings lag), and
	// runs of more than three intervals without a scrape.
	failed, slow map[string][]time.Time
	gaps         map[string][][2]time.Time
	// late: scrapes in which the exporter said its probe's unexplained
	// stolen time was unknown because it had not read NVML's samples past
	// the probe's windows in time (reason samples_not_read): the exporter
	// itself was starved of CPU around a probe, which no scrape shows.
	late map[string][]time.Time
	errs []string
}

func newScrapeLoop(t *testing.T, interval time.Duration, t0 time.Time) *scrapeLoop {
	return &scrapeLoop{st: teststorage.New(t), interval: interval, timeout: 3 * time.Second, t0: t0,
		failed: map[string][]time.Time{}, slow: map[string][]time.Time{}, gaps: map[string][][2]time.Time{},
		late: map[string][]time.Time{}}
}

// run scrapes the exporter at addr, of scenario cluster, at t0, t0 +
// interval, ... until end or ctx's end.
func (s *scrapeLoop) run(ctx context.Context, cluster, addr string, end time.Time) {
	client := &http.Client{Timeout: s.timeout}
	target := labels.FromStrings("job", "gpulens-exporter", "instance", addr, "cluster", cluster)
	prev := map[string]labels.Labels{}
	last := time.Time{}
	for tick := s.t0; !tick.After(end); {
		timer := time.NewTimer(time.Until(tick))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		began := time.Now()
		if !last.IsZero() && began.Sub(last) > 3*s.interval {
			s.mu.Lock()
			s.gaps[cluster] = append(s.gaps[cluster], [2]time.Time{last, began})
			s.mu.Unlock()
		}
		last = began
		prev = s.scrape(ctx, client, target, addr, began, prev)
		if time.Since(began) > s.interval {
			s.mu.Lock()
			s.slow[cluster] = append(s.slow[cluster], began)
			s.mu.Unlock()
		}
		// The next tick after now: a tick the scrape overran is skipped.
		for !tick.After(time.Now()) {
			tick = tick.Add(s.interval)
		}
	}
}

// scrape reads one exposition at ts and appends it with the target's
// labels, up and the stale markers; it returns the series it appended.
func (s *scrapeLoop) scrape(ctx context.Context, client *http.Client, target labels.Labels, addr string, ts time.Time, prev map[string]labels.Labels) map[string]labels.Labels {
	ms := ts.UnixMilli()
	cur := map[string]labels.Labels{}
	late := false
	body, ctype, err := get(ctx, client, "http://"+addr+"/metrics")
	app := s.st.Appender(ctx)
	add := func(ls labels.Labels, v float64) {
		if _, err := app.Append(0, ls, ms, v); err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Sprintf("%s at %s: %v", ls, ts.Format(time.StampMilli), err))
			s.mu.Unlock()
		}
	}
	if err == nil {
		err = parseExposition(body, ctype, target, func(ls labels.Labels, v float64) {
			key := ls.String()
			if _, dup := cur[key]; dup {
				return // Prometheus rejects a repeated series; the first stays
			}
			cur[key] = ls
			add(ls, v)
			if v == 1 && ls.Get(labels.MetricName) == "gpulens_probe_unexplained_stolen_time_unknown" && ls.Get("reason") == gpuprobe.UnknownSamplesNotRead {
				late = true
			}
		})
	}
	if late {
		s.mu.Lock()
		s.late[target.Get("cluster")] = append(s.late[target.Get("cluster")], ts)
		s.mu.Unlock()
	}
	up := 1.0
	if err != nil {
		up = 0
		cur = map[string]labels.Labels{}
		s.mu.Lock()
		s.failed[target.Get("cluster")] = append(s.failed[target.Get("cluster")], ts)
		s.mu.Unlock()
	}
	for key, ls := range prev {
		if _, ok := cur[key]; !ok {
			add(ls, staleNaN)
		}
	}
	lb := labels.NewBuilder(target)
	lb.Set(labels.MetricName, "up")
	add(lb.Labels(), up)
	if err := app.Commit(); err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, fmt.Sprintf("commit at %s: %v", ts.Format(time.StampMilli), err))
		s.mu.Unlock()
	}
	return cur
}

// staleNaN is Prometheus's stale marker.
var staleNaN = math.Float64frombits(value.StaleNaN)

// get fetches u in the Prometheus text format, as a scrape that offers
// only that format does.
func get(ctx context.Context, client *http.Client, u string) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("%s: %s", u, resp.Status)
	}
	return body, resp.Header.Get("Content-Type"), nil
}

// parseExposition calls add for every float sample of an exposition, with
// the target's labels attached as Prometheus attaches them with
// honor_labels false: a label of the exposition that a target label
// overrides is kept as exported_NAME.
func parseExposition(body []byte, ctype string, target labels.Labels, add func(labels.Labels, float64)) error {
	p, err := textparse.New(body, ctype, nil, textparse.ParserOptions{FallbackContentType: "text/plain"})
	if p == nil {
		return fmt.Errorf("content type %q: %v", ctype, err)
	}
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if entry != textparse.EntrySeries {
			continue
		}
		_, explicit, v := p.Series()
		if explicit != nil {
			return fmt.Errorf("sample with an explicit timestamp: the scenario test stamps samples as a scrape does")
		}
		var ls labels.Labels
		p.Labels(&ls)
		lb := labels.NewBuilder(ls)
		target.Range(func(l labels.Label) {
			if old := ls.Get(l.Name); old != "" {
				lb.Set("exported_"+l.Name, old)
			}
			lb.Set(l.Name, l.Value)
		})
		add(lb.Labels(), v)
	}
}

// evaluate evaluates the rule groups of the files in rulesDir (already
// scaled k times) over the scraped TSDB from t0 to end, each group at every
// multiple of its interval from t0 (defaultInterval where a group names
// none), writing records and ALERTS back as a Prometheus server does, and
// returns the engine that answers queries over the result. A rule that
// fails to evaluate is a test error.
func (s *scrapeLoop) evaluate(ctx context.Context, t *testing.T, rulesDir string, defaultInterval time.Duration, end time.Time, k int) *promql.Engine {
	t.Helper()
	eng := newEngine(k)
	files, err := filepath.Glob(filepath.Join(rulesDir, "*.rules.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in %s: %v", rulesDir, err)
	}
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(eng, s.st),
		AppendableV2: s.st,
		Queryable:    s.st,
		Context:      ctx,
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
		Parser:       parser.NewParser(parser.Options{}),
	})
	groupMap, errs := m.LoadGroups(defaultInterval, labels.EmptyLabels(), "", nil, false, files...)
	if len(errs) > 0 {
		t.Fatalf("loading %s: %v", rulesDir, errs)
	}
	groups := make([]*rules.Group, 0, len(groupMap))
	for _, g := range groupMap {
		groups = append(groups, g)
		for _, r := range g.Rules() {
			if a, ok := r.(*rules.AlertingRule); ok {
				a.SetRestored(true) // a server that has run all along
			}
		}
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].File() != groups[j].File() {
			return groups[i].File() < groups[j].File()
		}
		return groups[i].Name() < groups[j].Name()
	})
	step := defaultInterval
	for _, g := range groups {
		if g.Interval()%step != 0 {
			t.Fatalf("group %s: interval %s is not a multiple of %s", g.Name(), g.Interval(), step)
		}
	}
	failing := map[string]bool{}
	for ts := s.t0; !ts.After(end); ts = ts.Add(step) {
		for _, g := range groups {
			if ts.Sub(s.t0)%g.Interval() != 0 {
				continue
			}
			g.Eval(ctx, ts)
			for _, r := range g.Rules() {
				if err := r.LastError(); err != nil && !failing[r.Name()] {
					failing[r.Name()] = true
					t.Errorf("rule %s of group %s fails at sim %s: %v", r.Name(), g.Name(), fmtMin(time.Duration(ts.Sub(s.t0))*time.Duration(k)), err)
				}
			}
		}
	}
	s.mu.Lock()
	for _, e := range s.errs {
		t.Errorf("scrape: %s", e)
	}
	s.mu.Unlock()
	return eng
}

// newEngine is a PromQL engine with a Prometheus server's defaults, its
// lookback delta (5 m) scaled k times down.
func newEngine(k int) *promql.Engine {
	return promql.NewEngine(promql.EngineOpts{
		MaxSamples: 50_000_000, Timeout: time.Minute,
		LookbackDelta:    5 * time.Minute / time.Duration(k),
		EnableAtModifier: true, EnableNegativeOffset: true,
	})
}

// evaluateRules is evaluate, then the ALERTS samples of state firing and
// pending by scenario as episodes in sim time.
func (s *scrapeLoop) evaluateRules(ctx context.Context, t *testing.T, rulesDir string, defaultInterval time.Duration, end time.Time, k int) (firing, pending map[string][]episode) {
	t.Helper()
	eng := s.evaluate(ctx, t, rulesDir, defaultInterval, end, k)
	episodes := func(state string) map[string][]episode {
		series, err := s.rawRange(ctx, eng, fmt.Sprintf(`ALERTS{alertstate=%q}`, state), end, k)
		if err != nil {
			t.Fatal(err)
		}
		return episodesOf(series)
	}
	return episodes("firing"), episodes("pending")
}

// query runs an instant query of expr at ts over what was scraped and
// evaluated.
func (s *scrapeLoop) query(ctx context.Context, eng *promql.Engine, expr string, ts time.Time) ([]promSample, error) {
	qry, err := eng.NewInstantQuery(ctx, s.st, nil, expr, ts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", expr, err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return nil, fmt.Errorf("%s: %w", expr, res.Err)
	}
	switch v := res.Value.(type) {
	case promql.Scalar:
		return []promSample{{metric: map[string]string{}, value: v.V}}, nil
	case promql.Vector:
		out := make([]promSample, 0, len(v))
		for _, smp := range v {
			out = append(out, promSample{metric: smp.Metric.Map(), value: smp.F})
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: result type %s", expr, res.Value.Type())
}

// rawRange returns every raw sample of the series sel selects from t0 to
// at, with sim times.
func (s *scrapeLoop) rawRange(ctx context.Context, eng *promql.Engine, sel string, at time.Time, k int) ([]rawSeries, error) {
	q := fmt.Sprintf(`%s[%dms]`, sel, (at.Sub(s.t0) + time.Second).Milliseconds())
	qry, err := eng.NewInstantQuery(ctx, s.st, nil, q, at)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return nil, fmt.Errorf("%s: %w", q, res.Err)
	}
	mat, err := res.Matrix()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	out := make([]rawSeries, 0, len(mat))
	for _, ser := range mat {
		rs := rawSeries{metric: ser.Metric.Map()}
		for _, p := range ser.Floats {
			rs.points = append(rs.points, point{s.sim(time.UnixMilli(p.T), k), p.F})
		}
		out = append(out, rs)
	}
	return out, nil
}

// sim is the sim time of wall time ts.
func (s *scrapeLoop) sim(ts time.Time, k int) time.Duration {
	return ts.Sub(s.t0) * time.Duration(k)
}

// disturbances lists, by scenario, the scrapes that failed or were slow
// and the runs without a scrape, in sim time.
func (s *scrapeLoop) disturbances(k int) map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for sc, ts := range s.failed {
		for _, t := range ts {
			out[sc] = append(out[sc], "failed scrape at "+fmtMin(s.sim(t, k)))
		}
	}
	for sc, ts := range s.slow {
		for _, t := range ts {
			out[sc] = append(out[sc], "scrape slower than its interval at "+fmtMin(s.sim(t, k)))
		}
	}
	for sc, ts := range s.late {
		out[sc] = append(out[sc], fmt.Sprintf("the exporter's probe read NVML's samples too late (samples_not_read) in %d scrapes from %s", len(ts), fmtMin(s.sim(ts[0], k))))
	}
	for sc, gaps := range s.gaps {
		for _, g := range gaps {
			out[sc] = append(out[sc], fmt.Sprintf("no scrape from %s to %s", fmtMin(s.sim(g[0], k)), fmtMin(s.sim(g[1], k))))
		}
	}
	for _, d := range out {
		sort.Strings(d)
	}
	return out
}

// TestScrapeLoopCountsALateProbeAsDisturbed: a scrape in which the
// exporter says its probe read NVML's samples too late (unknown, reason
// samples_not_read) marks the scenario disturbed, as a failed or slow
// scrape does; the other reasons do not.
func TestScrapeLoopCountsALateProbeAsDisturbed(t *testing.T) {
	t.Parallel()
	body := map[string]string{
		"late": "# TYPE gpulens_probe_unexplained_stolen_time_unknown gauge\n" +
			"gpulens_probe_unexplained_stolen_time_unknown{gpu=\"0\",reason=\"samples_not_read\"} 1\n" +
			"gpulens_probe_unexplained_stolen_time_unknown{gpu=\"0\",reason=\"mig\"} 0\n",
		"mig": "# TYPE gpulens_probe_unexplained_stolen_time_unknown gauge\n" +
			"gpulens_probe_unexplained_stolen_time_unknown{gpu=\"0\",reason=\"samples_not_read\"} 0\n" +
			"gpulens_probe_unexplained_stolen_time_unknown{gpu=\"0\",reason=\"mig\"} 1\n",
	}
	t0 := time.Unix(1_800_000_000, 0)
	loop := newScrapeLoop(t, time.Second, t0)
	client := &http.Client{Timeout: 5 * time.Second}
	for cluster, text := range body {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, text)
		}))
		defer srv.Close()
		target := labels.FromStrings("job", "gpulens-exporter", "instance", "x", "cluster", cluster)
		loop.scrape(context.Background(), client, target, strings.TrimPrefix(srv.URL, "http://"), t0.Add(30*time.Second), nil)
	}
	got := loop.disturbances(1)
	if len(got["late"]) != 1 || !strings.Contains(got["late"][0], "samples_not_read") || len(got["mig"]) != 0 {
		t.Errorf("disturbances %q; want one for the late probe, none for the MIG instance", got)
	}
}
