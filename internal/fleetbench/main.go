// Command fleetbench measures how the shipped rules and dashboards cost one
// Prometheus as the fleet grows (make fleet-bench; docs/scaling.md).
//
// For each size it serves ceil(size/8) simulated 8-GPU nodes as distinct
// scrape targets from one process (fanout): each node's exposition is the
// latest of one of a few real gpulens-exporter processes running a
// simulated scenario (tenants, processes, MIG, host, probe, prices), so
// every series is the real exporter's. A fresh pinned Prometheus scrapes
// them every 15 s with every shipped rule file (alerts/*.rules.yml). After
// a fill window it reports the samples ingested per second, the head
// series, Prometheus's RSS and CPU, each rule group's evaluation time
// against its interval (the largest seen in the window), and the time of
// every panel query of the fleet, cost and sharing dashboards over their
// default range. The tables are printed as markdown. Everything it starts
// runs in its own process group and is stopped on return, signal or the
// -deadline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	sizes      []int
	exporter   string
	prometheus string
	rules      string
	dashDir    string
	boards     []string
	scenario   string
	templates  int
	gpuUSD     string
	scrape     time.Duration
	window     time.Duration
	settle     time.Duration
	deadline   time.Duration
	workdir    string
	out        string
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleetbench: %v\n", err)
		os.Exit(2)
	}
	if err := runWithSignals(o); err != nil {
		fmt.Fprintf(os.Stderr, "fleetbench: %v\n", err)
		os.Exit(1)
	}
}

// runWithSignals is run until SIGINT, SIGTERM or o.deadline (its deferred
// calls run before main exits).
func runWithSignals(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.deadline)
	defer cancel()
	return run(ctx, o, os.Stdout, os.Stderr)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fleetbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "200 500 1000", "fleet sizes in GPUs, space- or comma-separated (nodes of 8 GPUs)")
	boards := fs.String("boards", "gpulens-fleet gpulens-cost gpulens-sharing", "dashboards whose panels are timed")
	fs.StringVar(&o.exporter, "exporter", "bin/gpulens-exporter", "the gpulens-exporter binary")
	fs.StringVar(&o.prometheus, "prometheus", "bin/prometheus", "the Prometheus server binary")
	fs.StringVar(&o.rules, "rules", "alerts/*.rules.yml", "the rule files (a glob)")
	fs.StringVar(&o.dashDir, "dashboards", "dashboards", "directory of the dashboards' JSON")
	fs.StringVar(&o.scenario, "scenario", "demo", "simulated scenario of the template exporters (8 GPUs per node)")
	fs.IntVar(&o.templates, "templates", 4, "template exporters (seeds 1..N); node i serves template i mod N")
	fs.StringVar(&o.gpuUSD, "gpu-hourly-usd", "2.5", "the template exporters' --cost.gpu-hourly-usd")
	fs.DurationVar(&o.scrape, "scrape-interval", 15*time.Second, "Prometheus's scrape and evaluation interval")
	fs.DurationVar(&o.window, "window", 6*time.Minute, "how long each size runs after its targets are up before it is measured")
	fs.DurationVar(&o.settle, "settle", 3*time.Minute, "longest wait for every target to be up")
	fs.DurationVar(&o.deadline, "deadline", 90*time.Minute, "the whole run's deadline; what is measured by then is printed")
	fs.StringVar(&o.workdir, "workdir", ".scratch/fleet-bench", "directory of the Prometheus data, configs and logs")
	fs.StringVar(&o.out, "out", "", "also write the tables to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, f := range strings.FieldsFunc(*sizes, func(r rune) bool { return r == ' ' || r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 8 {
			return o, fmt.Errorf("-sizes: %q is not a number of GPUs of at least 8", f)
		}
		o.sizes = append(o.sizes, n)
	}
	if len(o.sizes) == 0 {
		return o, errors.New("-sizes: no size given")
	}
	o.boards = strings.Fields(*boards)
	if o.templates < 1 {
		return o, fmt.Errorf("-templates: %d, want at least 1", o.templates)
	}
	if o.scrape < time.Second {
		return o, fmt.Errorf("-scrape-interval: %s, want at least 1s", o.scrape)
	}
	if o.window < 2*o.scrape {
		return o, fmt.Errorf("-window: %s, want at least two scrape intervals (%s)", o.window, 2*o.scrape)
	}
	return o, nil
}

// sizeResult is what one size measured.
type sizeResult struct {
	gpus, nodes, up  int
	headSeries       float64
	samplesPerSec    float64
	rssBytes         float64 // the largest seen in the window
	cpuCores         float64 // Prometheus's CPU over the window
	scrapeMax        float64 // slowest target's last scrape, seconds
	window, dataSpan time.Duration
	groups           map[string]groupResult
	panels           map[string]panelResult
	ruleErrors       []string
	loadBefore       string
	loadAfter        string
}

type groupResult struct {
	interval, maxEval float64
	samples           int64 // read by one evaluation of its rules' expressions
}

type panelResult struct {
	measured, projected time.Duration
	samples             int64 // read with the whole range full of data (projected like the time)
	series              int
	err                 string
}

func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	for _, p := range []string{o.exporter, o.prometheus} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (make fleet-bench builds it)", err)
		}
	}
	ruleFiles, err := filepath.Glob(o.rules)
	if err != nil || len(ruleFiles) == 0 {
		return fmt.Errorf("-rules %q: no rule file", o.rules)
	}
	for i, f := range ruleFiles {
		if ruleFiles[i], err = filepath.Abs(f); err != nil {
			return err
		}
	}
	queries, ranges, err := loadPanels(o.dashDir, o.boards)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.workdir, 0o755); err != nil {
		return err
	}
	procs := &procGroup{}
	defer procs.stopAll()

	// The template exporters, shared by every size; their logs stay open
	// while they run.
	var templates []string
	var logs []*os.File
	defer func() {
		for _, l := range logs {
			_ = l.Close()
		}
	}()
	for k := range o.templates {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		log, err := os.Create(filepath.Join(o.workdir, fmt.Sprintf("exporter-%d.log", k)))
		if err != nil {
			return err
		}
		logs = append(logs, log)
		if err := procs.start(log, o.exporter, "--sim.scenario="+o.scenario, "--sim.seed="+strconv.Itoa(k+1),
			"--collector.probe", "--cost.gpu-hourly-usd="+o.gpuUSD, "--web.listen-address="+addr); err != nil {
			return err
		}
		templates = append(templates, "http://"+addr)
	}
	for _, t := range templates {
		if err := waitHTTP(ctx, t+"/metrics", time.Minute); err != nil {
			return fmt.Errorf("template exporter: %w", err)
		}
	}
	fmt.Fprintf(stderr, "fleetbench: %d template exporters (%s) up; %d panel queries of %s\n", len(templates), o.scenario, len(queries), strings.Join(o.boards, ", "))

	var results []sizeResult
	for _, size := range o.sizes {
		fmt.Fprintf(stderr, "fleetbench: %d GPUs: starting (window %s)\n", size, o.window)
		r, err := runSize(ctx, o, size, templates, ruleFiles, queries, ranges, procs, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "fleetbench: %d GPUs: %v\n", size, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return errors.New("no size measured")
	}
	var b strings.Builder
	writeTables(&b, o, results, queries)
	fmt.Fprint(stdout, b.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func runSize(ctx context.Context, o options, size int, templates, ruleFiles []string, queries []panelQuery, ranges map[string]time.Duration, procs *procGroup, stderr io.Writer) (sizeResult, error) {
	r := sizeResult{gpus: size, nodes: (size + 7) / 8, window: o.window, groups: map[string]groupResult{}, panels: map[string]panelResult{}}
	r.loadBefore = loadavg()
	dir := filepath.Join(o.workdir, strconv.Itoa(size))
	if err := os.RemoveAll(dir); err != nil {
		return r, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	srv := &http.Server{Handler: newFanout(templates, r.nodes, o.scrape/3), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(promConfig(ln.Addr().String(), r.nodes, o.scrape, ruleFiles)), 0o644); err != nil {
		return r, err
	}
	addr, err := freeAddr()
	if err != nil {
		return r, err
	}
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return r, err
	}
	defer log.Close()
	p, err := procs.startProc(log, o.prometheus, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1d", "--log.level=warn")
	if err != nil {
		return r, err
	}
	defer procs.stop(p)
	prom, err := newPromClient("http://" + addr)
	if err != nil {
		return r, err
	}
	if err := waitHTTP(ctx, prom.base+"/-/ready", 2*time.Minute); err != nil {
		return r, fmt.Errorf("prometheus: %w (log: %s)", err, log.Name())
	}
	start := time.Now()

	// Every target up, or as many as are by the settle deadline.
	settle := time.Now().Add(o.settle)
	for {
		up, err := prom.scalar(ctx, `count(up{job="gpulens-exporter"} == 1) or vector(0)`)
		if err == nil {
			r.up = int(up)
		}
		if r.up == r.nodes || time.Now().After(settle) {
			break
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return r, err
		}
	}
	fmt.Fprintf(stderr, "fleetbench: %d GPUs: %d of %d targets up; filling %s\n", size, r.up, r.nodes, o.window)

	names := []string{"process_cpu_seconds_total", "prometheus_tsdb_head_samples_appended_total", "prometheus_tsdb_head_series", "process_resident_memory_bytes"}
	m0, err := prom.selfMetrics(ctx, names...)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	end := t0.Add(o.window)
	for {
		if gs, err := prom.ruleGroups(ctx); err == nil {
			for _, g := range gs {
				k := g.Name
				cur := r.groups[k]
				cur.interval = g.Interval
				// The first evaluations run while the head fills; count
				// those of the window.
				cur.maxEval = max(cur.maxEval, g.EvaluationTime)
				r.groups[k] = cur
			}
		}
		if m, err := prom.selfMetrics(ctx, "process_resident_memory_bytes"); err == nil {
			r.rssBytes = max(r.rssBytes, m["process_resident_memory_bytes"])
		}
		if !time.Now().Before(end) {
			break
		}
		if err := sleep(ctx, min(o.scrape, time.Until(end))); err != nil {
			return r, err
		}
	}
	m1, err := prom.selfMetrics(ctx, names...)
	if err != nil {
		return r, err
	}
	dt := time.Since(t0).Seconds()
	r.samplesPerSec = (m1["prometheus_tsdb_head_samples_appended_total"] - m0["prometheus_tsdb_head_samples_appended_total"]) / dt
	r.cpuCores = (m1["process_cpu_seconds_total"] - m0["process_cpu_seconds_total"]) / dt
	r.headSeries = m1["prometheus_tsdb_head_series"]
	r.rssBytes = max(r.rssBytes, m1["process_resident_memory_bytes"])
	if v, err := prom.scalar(ctx, `max(scrape_duration_seconds{job="gpulens-exporter"})`); err == nil {
		r.scrapeMax = v
	}
	// The samples one evaluation of each group reads: each rule's
	// expression as an instant query now (a recorded series a later rule
	// reads exists already: the same data as the group's evaluation).
	if gs, err := prom.ruleGroups(ctx); err == nil {
		for _, g := range gs {
			cur := r.groups[g.Name]
			for _, rule := range g.Rules {
				if rule.Health == "err" {
					r.ruleErrors = append(r.ruleErrors, fmt.Sprintf("%s/%s: %s", g.Name, rule.Name, rule.LastError))
				}
				if res, err := prom.instant(ctx, rule.Query, time.Now()); err == nil {
					cur.samples += res.samples
				}
			}
			r.groups[g.Name] = cur
		}
	}

	// The panels, as Grafana asks for them on the default view, after the
	// window: measured on the data there is, and projected to a range full
	// of data.
	now := time.Now()
	r.dataSpan = now.Sub(start)
	fmt.Fprintf(stderr, "fleetbench: %d GPUs: %.0f head series, %.0f samples/s; timing %d panel queries\n", size, r.headSeries, r.samplesPerSec, len(queries))
	for _, q := range queries {
		r.panels[q.Key()] = timePanel(ctx, prom, q, ranges[q.Board], o.scrape, now, r.dataSpan)
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
	}
	r.loadAfter = loadavg()
	return r, nil
}

// timePanel times q as Grafana sends it on the default view: a range query
// over the dashboard's default range, or an instant one for tables. With
// only dataSpan of that range holding data, it also runs the query over
// the last dataSpan alone, at the same step, and scales that time by
// range / dataSpan: a range query's work is its steps times the series it
// reads, so this is the query's cost once the whole range holds data (an
// upper estimate: the per-query overhead is scaled too). An instant query
// over $__range is scaled the same way; other instant queries read only
// the last minutes and are not. Each is the fastest of two runs: the other
// work of a busy machine adds to a run, not to the query's cost.
func timePanel(ctx context.Context, prom *promClient, q panelQuery, rng, scrape time.Duration, now time.Time, dataSpan time.Duration) panelResult {
	stp := step(rng, q.Width, scrape)
	run := func(span time.Duration) (queryResult, error) {
		expr, err := substitute(q.Expr, span, stp, scrape)
		if err != nil {
			return queryResult{}, err
		}
		var best queryResult
		for i := range 2 {
			var res queryResult
			if q.Instant {
				res, err = prom.instant(ctx, expr, now)
			} else {
				res, err = prom.rangeQuery(ctx, expr, now.Add(-span), now, stp)
			}
			if err != nil {
				return queryResult{}, err
			}
			if i == 0 || res.elapsed < best.elapsed {
				best = res
			}
		}
		return best, nil
	}
	full, err := run(rng)
	if err != nil {
		return panelResult{err: err.Error()}
	}
	out := panelResult{measured: full.elapsed, projected: full.elapsed, samples: full.samples, series: full.series}
	if (!q.Instant || usesRange(q.Expr)) && dataSpan < rng {
		part, err := run(dataSpan)
		if err != nil {
			return panelResult{err: err.Error()}
		}
		scale := float64(rng) / float64(dataSpan)
		out.projected = time.Duration(float64(part.elapsed) * scale)
		out.samples = int64(float64(part.samples) * scale)
	}
	return out
}

// promConfig is the benchmark's Prometheus configuration: one target per
// node, all on the fanout's address, told apart by path and instance.
func promConfig(fanoutAddr string, nodes int, scrape time.Duration, ruleFiles []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n  scrape_timeout: %s\n", promDuration(scrape), promDuration(scrape), promDuration(scrape*2/3))
	b.WriteString("rule_files:\n")
	for _, f := range ruleFiles {
		fmt.Fprintf(&b, "  - %q\n", f)
	}
	b.WriteString("scrape_configs:\n  - job_name: gpulens-exporter\n    static_configs:\n")
	for i := range nodes {
		fmt.Fprintf(&b, "      - targets: [%q]\n        labels: {cluster: bench, instance: \"node-%05d:9842\", __metrics_path__: %q}\n", fanoutAddr, i, nodePath(i))
	}
	return b.String()
}

func writeTables(w io.Writer, o options, rs []sizeResult, queries []panelQuery) {
	last := rs[len(rs)-1]
	fmt.Fprintf(w, "\nFleet benchmark: %d-GPU nodes of scenario %q (%d template exporters, probe and prices on), scraped every %s with %s; each size measured over a %s window after its targets were up; %s/%s, %d CPUs, load average before/after each size below.\n\n",
		8, o.scenario, o.templates, o.scrape, o.rules, o.window, runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintln(w, "| GPUs | nodes (targets up) | head series | samples/s | Prometheus RSS | Prometheus CPU (cores) | slowest scrape | slowest rule group (eval / interval) | panels over 1 s (measured / with full range) | load avg before → after |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
	for _, r := range rs {
		gname, gr := slowestGroup(r)
		over, overP := 0, 0
		for _, p := range r.panels {
			if p.measured > time.Second {
				over++
			}
			if p.projected > time.Second {
				overP++
			}
		}
		fmt.Fprintf(w, "| %d | %d (%d) | %.0f | %.0f | %.0f MiB | %.2f | %.2f s | %s %.3f s / %.0f s (%.1f %%) | %d / %d | %s → %s |\n",
			r.gpus, r.nodes, r.up, r.headSeries, r.samplesPerSec, r.rssBytes/(1<<20), r.cpuCores, r.scrapeMax,
			gname, gr.maxEval, gr.interval, 100*gr.maxEval/gr.interval, over, overP, r.loadBefore, r.loadAfter)
	}

	// Rule groups: the largest evaluation time of the window per size.
	var groups []string
	for g := range last.groups {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	fmt.Fprintf(w, "\nRule groups: the longest evaluation in the window (prometheus_rule_group_last_duration_seconds), its share of the group's interval, and the samples one evaluation reads (its rules' expressions with the query stats: the work, which a busy machine does not inflate).\n\n| group (interval) |")
	for _, r := range rs {
		fmt.Fprintf(w, " %d GPUs |", r.gpus)
	}
	fmt.Fprint(w, "\n|---|")
	for range rs {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, g := range groups {
		fmt.Fprintf(w, "| %s (%.0f s) |", g, last.groups[g].interval)
		for _, r := range rs {
			gr := r.groups[g]
			fmt.Fprintf(w, " %.0f ms (%.1f %%), %s samples |", 1000*gr.maxEval, 100*gr.maxEval/max(gr.interval, 1e-9), count(gr.samples))
		}
		fmt.Fprintln(w)
	}

	// Panels: slowest first at the largest size.
	sorted := append([]panelQuery(nil), queries...)
	sort.SliceStable(sorted, func(i, j int) bool {
		return last.panels[sorted[i].Key()].samples > last.panels[sorted[j].Key()].samples
	})
	fmt.Fprintf(w, "\nPanel queries of the default view (every variable All, the dashboard's default range), the most samples read first: the query time over the default range holding %s of data, then with the whole range full of data (the query over the data held, scaled by range / data held: an upper estimate), the samples it reads with the range full (scaled likewise) and the series it returns.\n\n| panel (target) |", last.dataSpan.Round(time.Second))
	for _, r := range rs {
		fmt.Fprintf(w, " %d GPUs |", r.gpus)
	}
	fmt.Fprint(w, "\n|---|")
	for range rs {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, q := range sorted {
		fmt.Fprintf(w, "| %s |", strings.ReplaceAll(q.Key(), "|", "\\|"))
		for _, r := range rs {
			p := r.panels[q.Key()]
			if p.err != "" {
				fmt.Fprintf(w, " error: %.60s |", strings.ReplaceAll(p.err, "|", "\\|"))
				continue
			}
			fmt.Fprintf(w, " %s / %s, %s samples, %d series |", ms(p.measured), ms(p.projected), count(p.samples), p.series)
		}
		fmt.Fprintln(w)
	}
	for _, r := range rs {
		for _, e := range r.ruleErrors {
			fmt.Fprintf(w, "\n%d GPUs: rule error: %s\n", r.gpus, e)
		}
	}
}

func slowestGroup(r sizeResult) (string, groupResult) {
	var name string
	var best groupResult
	for g, gr := range r.groups {
		if name == "" || gr.maxEval/max(gr.interval, 1e-9) > best.maxEval/max(best.interval, 1e-9) {
			name, best = g, gr
		}
	}
	return name, best
}

func ms(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// count writes n with a k or M suffix.
func count(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	default:
		return strconv.FormatInt(n, 10)
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return "?"
	}
	return f[0]
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// waitHTTP polls url until it answers 200, for at most limit.
func waitHTTP(ctx context.Context, url string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		last = err
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return fmt.Errorf("%s not ready within %s: %v", url, limit, last)
		}
	}
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// procGroup holds the processes the benchmark started, each in its own
// process group, to stop them (SIGTERM, then SIGKILL) however it returns.
type procGroup struct {
	procs []*exec.Cmd
}

func (g *procGroup) start(log io.Writer, bin string, args ...string) error {
	_, err := g.startProc(log, bin, args...)
	return err
}

func (g *procGroup) startProc(log io.Writer, bin string, args ...string) (*exec.Cmd, error) {
	//nolint:noctx // the group stops its processes itself (SIGTERM, then SIGKILL) however run returns; a context would SIGKILL them at once
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	g.procs = append(g.procs, cmd)
	return cmd, nil
}

// stop ends cmd's process group: SIGTERM, SIGKILL after 10 s.
func (g *procGroup) stop(cmd *exec.Cmd) {
	for i, c := range g.procs {
		if c == cmd {
			g.procs = append(g.procs[:i], g.procs[i+1:]...)
			break
		}
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func (g *procGroup) stopAll() {
	for len(g.procs) > 0 {
		g.stop(g.procs[len(g.procs)-1])
	}
}
