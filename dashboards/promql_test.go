package dashboards

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"

	"github.com/gpulens/gpulens/internal/clockevent"
)

// The dashboards' queries run here against Prometheus's own query engine
// (in process), on a small fleet written as Prometheus test series with the
// labels the exporter and the load generator really serve, after the
// shipped recording rules (alerts/*.rules.yml) have been
// evaluated over it every 15 s, as a Prometheus server would.

// fixtureEnd is when the queries are evaluated: 30 minutes of data.
const (
	fixtureStep  = 15 * time.Second
	fixtureSteps = 120
	fixtureEnd   = fixtureSteps * fixtureStep
)

// series is one test series: name{labels} and its values in promqltest
// notation (one value per 15 s step).
type series struct {
	name   string
	labels string
	values string
}

const (
	n1       = `cluster="c1",job="gpulens-exporter",instance="n1:9842"`
	n2       = `cluster="c1",job="gpulens-exporter",instance="n2:9842"`
	loadgen  = `cluster="c1",job="gpulens-loadgen",instance="lg:9843",target="http://sim:8000/v1",model="m",scenario="s"`
	constant = "x120" // suffix: the same step for every sample
)

// each repeats v for every step.
func each(v float64) string { return fmt.Sprintf("%g+0%s", v, constant) }

// perSecond is a counter growing by rate per second.
func perSecond(rate float64) string {
	return fmt.Sprintf("0+%g%s", rate*fixtureStep.Seconds(), constant)
}

// processSeries are the exporter's series of one process.
func processSeries(node, gpu, uuid, pid, ns, pod, container, proc, gi, ci string, memMiB, sm, share float64) []series {
	l := fmt.Sprintf(`%s,gpu="%s",uuid="%s",pid="%s",namespace="%s",pod="%s",container="%s",process_name="%s",gpu_instance_id="%s",compute_instance_id="%s"`,
		node, gpu, uuid, pid, ns, pod, container, proc, gi, ci)
	out := []series{
		{"gpulens_process_info", l + `,cmdline="` + proc + `",container_id="",container_runtime="containerd",type="compute",user="1000"`, each(1)},
		{"gpulens_process_memory_used_bytes", l, each(memMiB * (1 << 20))},
		// What the host says of the process (procfs), MIG or not.
		{"gpulens_process_cpu_seconds_total", l + `,mode="user"`, perSecond(0.5)},
		{"gpulens_process_cpu_seconds_total", l + `,mode="system"`, perSecond(0.25)},
		{"gpulens_process_threads", l, each(8)},
		{"gpulens_process_resident_memory_bytes", l, each(4 << 30)},
		{"gpulens_process_io_read_bytes_total", l, perSecond(1 << 20)},
		{"gpulens_process_io_written_bytes_total", l, perSecond(1 << 10)},
	}
	// NVML has no per-process samples in MIG mode: the exporter serves no
	// SM utilisation there, nor the time share computed from it.
	if gi == "" {
		out = append(out,
			series{"gpulens_process_sm_utilization_ratio", l, each(sm)},
			series{"gpulens_process_sm_busy_seconds_total", l, perSecond(sm)},
			series{"gpulens_process_gpu_time_share_ratio", l, each(share)})
	}
	return out
}

// gpuSeries are the exporter's per-GPU series: busy and contended shares of
// time, power, and the health series of a healthy GPU.
func gpuSeries(node, gpu, uuid string, busy, contended, watts float64, active int) []series {
	l := fmt.Sprintf(`%s,gpu="%s",uuid="%s"`, node, gpu, uuid)
	out := []series{
		{"gpulens_gpu_info", l + `,name="NVIDIA H100 80GB HBM3",driver_version="550.54.15"`, each(1)},
		{"gpulens_gpu_up", l, each(1)},
		{"gpulens_gpu_busy_seconds_total", l, perSecond(busy)},
		{"gpulens_gpu_contended_seconds_total", l, perSecond(contended)},
		{"gpulens_gpu_active_processes", l, each(float64(active))},
		{"gpulens_gpu_energy_joules_total", l, perSecond(watts)},
		{"gpulens_gpu_power_watts", l, each(watts)},
		{"gpulens_gpu_memory_used_bytes", l, each(40 << 30)},
		{"gpulens_gpu_memory_free_bytes", l, each(39 << 30)},
		{"gpulens_gpu_memory_total_bytes", l, each(80 << 30)},
		{"gpulens_gpu_remapping_pending", l, each(0)},
		{"gpulens_gpu_remapping_failed", l, each(0)},
		{"gpulens_gpu_ecc_errors_total", l + `,type="corrected"`, each(0)},
		{"gpulens_gpu_ecc_errors_total", l + `,type="uncorrected"`, each(0)},
	}
	for _, r := range clockevent.All() {
		out = append(out, series{"gpulens_gpu_clock_event_active", l + `,reason="` + r.Name + `"`, each(0)})
	}
	return out
}

// healthyFleet is two nodes:
//
//	n1 GPU 0  llm-serve (serving) and a trainer (research) time-sliced:
//	          busy 80 %, contended 40 %; probed, no stolen time.
//	n1 GPU 1  idle and allocated to namespace research (no busy time: the
//	          contention ratio must be 0, not NaN); probed.
//	n1 GPU 2  MIG: instances 1 (3g.40gb, a serving process, which has no SM
//	          utilisation or time share: NVML has no per-process samples in
//	          MIG mode) and 2 (4g.40gb).
//	n2 GPU 0  one team-b process.
//
// and a load generator at 8 successful requests per second, every error
// class at 0.
func healthyFleet() []series {
	var s []series
	s = append(s, gpuSeries(n1, "0", "GPU-a0", 0.8, 0.4, 500, 2)...)
	s = append(s, gpuSeries(n1, "1", "GPU-a1", 0, 0, 70, 0)...)
	s = append(s, gpuSeries(n1, "2", "GPU-a2", 0.3, 0, 200, 1)...)
	s = append(s, gpuSeries(n2, "0", "GPU-b0", 0.5, 0, 400, 1)...)
	s = append(s, processSeries(n1, "0", "GPU-a0", "4242", "serving", "vllm-0", "vllm", "python3", "", "", 30720, 0.35, 0.4)...)
	s = append(s, processSeries(n1, "0", "GPU-a0", "5151", "research", "train-0", "trainer", "torchrun", "", "", 20480, 0.6, 0.6)...)
	s = append(s, processSeries(n1, "2", "GPU-a2", "9100", "serving", "chat-mig-0", "vllm", "python3", "1", "0", 30000, 0.3, 1)...)
	s = append(s, processSeries(n2, "0", "GPU-b0", "7000", "team-b", "chat-b-0", "vllm", "python3", "", "", 24576, 0.5, 1)...)
	for _, gi := range []struct{ id, mig, profile string }{{"1", "MIG-1", "3g.40gb"}, {"2", "MIG-2", "4g.40gb"}} {
		l := n1 + `,gpu="2",uuid="GPU-a2",gpu_instance_id="` + gi.id + `",compute_instance_id="0",mig_uuid="` + gi.mig + `"`
		s = append(s,
			series{"gpulens_mig_instance_info", l + `,profile="` + gi.profile + `"`, each(1)},
			series{"gpulens_mig_memory_used_bytes", l, each(10 << 30)},
			series{"gpulens_mig_memory_total_bytes", l, each(40 << 30)},
			series{"gpulens_mig_sm_activity_ratio", l, each(0.25)},
		)
	}
	for _, g := range []struct{ gpu, uuid string }{{"0", "GPU-a0"}, {"1", "GPU-a1"}} {
		l := n1 + `,gpu="` + g.gpu + `",uuid="` + g.uuid + `"`
		s = append(s,
			series{"gpulens_probe_stolen_time_ratio", l, each(0)},
			series{"gpulens_probe_unexplained_stolen_time_ratio", l, each(0)},
			series{"gpulens_probe_device_copy_bandwidth_bytes_per_second", l, each(3e12)},
			series{"gpulens_probe_fp32_flop_per_second", l, each(5e13)},
			series{"gpulens_probe_last_success_timestamp_seconds", l, fmt.Sprintf("-10+15%s", constant)},
			series{"gpulens_probe_up", l, each(1)},
		)
	}
	s = append(s,
		series{"gpulens_gpu_allocation_info", n1 + `,gpu="0",uuid="GPU-a0",namespace="serving",pod="vllm-0",container="vllm",resource="nvidia.com/gpu"`, each(1)},
		series{"gpulens_gpu_allocation_info", n1 + `,gpu="1",uuid="GPU-a1",namespace="research",pod="notebook-0",container="notebook",resource="nvidia.com/gpu"`, each(1)},
	)
	for _, n := range []string{n1, n2} {
		for _, c := range []string{"clocks", "memory", "pcie", "process", "utilization"} {
			s = append(s, series{"gpulens_scrape_collector_success", n + `,collector="` + c + `"`, each(1)})
		}
		s = append(s, series{"up", n, each(1)})
		// The host: 64 CPUs, a little CPU and I/O pressure.
		s = append(s,
			series{"gpulens_host_cpus", n, each(64)},
			series{"gpulens_host_pressure_stall_seconds_total", n + `,resource="cpu",kind="some"`, perSecond(0.05)},
			series{"gpulens_host_pressure_stall_seconds_total", n + `,resource="io",kind="some"`, perSecond(0.02)},
			series{"gpulens_host_pressure_stall_seconds_total", n + `,resource="io",kind="full"`, perSecond(0.01)},
		)
	}
	s = append(s, series{"up", `cluster="c1",job="gpulens-loadgen",instance="lg:9843"`, each(1)})
	for _, o := range []string{"success", "timeout", "connect", "http_429", "http_4xx", "http_5xx", "stream_broken", "cancelled_at_end", "parse"} {
		rate := 0.0
		if o == "success" {
			rate = 8
		}
		s = append(s, series{"gpulens_loadgen_requests_total", loadgen + `,outcome="` + o + `"`, perSecond(rate)})
	}
	s = append(s,
		series{"gpulens_loadgen_tokens_total", loadgen + `,kind="input"`, perSecond(8 * 256)},
		series{"gpulens_loadgen_tokens_total", loadgen + `,kind="output"`, perSecond(8 * 128)},
		// $2.50 an hour: a request costs 2.5 / 3600 / 8 = $0.0000868.
		series{"gpulens_loadgen_cost_usd_total", loadgen, perSecond(2.5 / 3600)},
		series{"gpulens_loadgen_in_flight_requests", loadgen, each(12)},
	)
	// Latency histograms (native): 120 observations per step in one bucket.
	for _, h := range []struct {
		name   string
		offset int
	}{
		{"time_to_first_token_seconds", -40}, {"inter_token_latency_seconds", -48}, {"time_per_output_token_seconds", -48},
		{"request_duration_seconds", 8}, {"schedule_lag_seconds", -80},
	} {
		s = append(s, series{"gpulens_loadgen_" + h.name, loadgen, fmt.Sprintf(
			"{{schema:3 sum:0 count:0}}+{{schema:3 sum:1 count:120 buckets:[120] offset:%d}}%s", h.offset, constant)})
	}
	return s
}

// failingFleet is healthyFleet with something wrong in every health panel:
// n1 GPU 0 held at its power cap, an XID 13 and corrected ECC errors on
// n1 GPU 2, a row remapping pending on n2 GPU 0, n2's PCIe collector failing
// with an NVML error every 15 s, and 0.5 timeouts per second.
func failingFleet() []series {
	var s []series
	for _, x := range healthyFleet() {
		switch {
		case x.name == "gpulens_gpu_clock_event_active" && strings.Contains(x.labels, `uuid="GPU-a0"`) && strings.Contains(x.labels, `reason="sw_power_cap"`),
			x.name == "gpulens_gpu_remapping_pending" && strings.Contains(x.labels, `uuid="GPU-b0"`):
			x.values = each(1)
		case x.name == "gpulens_gpu_ecc_errors_total" && strings.Contains(x.labels, `uuid="GPU-a2"`) && strings.Contains(x.labels, `type="corrected"`):
			x.values = perSecond(0.1)
		case x.name == "gpulens_scrape_collector_success" && strings.Contains(x.labels, n2) && strings.Contains(x.labels, `collector="pcie"`):
			x.values = each(0)
		case x.name == "gpulens_loadgen_requests_total" && strings.Contains(x.labels, `outcome="timeout"`):
			x.values = perSecond(0.5)
		}
		s = append(s, x)
	}
	return append(s,
		series{"gpulens_gpu_xid_errors_total", n1 + `,gpu="2",uuid="GPU-a2",xid="13"`, perSecond(1.0 / 60)},
		series{"gpulens_nvml_errors_total", n2 + `,call="GetPcieReplayCounter",error="ERROR_UNKNOWN"`, perSecond(1.0 / 15)},
	)
}

// promEnv is a test storage holding a fleet and the recording rules
// evaluated over it, and a query engine.
type promEnv struct {
	t   *testing.T
	st  storage.Storage
	eng *promql.Engine
}

func newPromEnv(t *testing.T, fleet []series) *promEnv {
	t.Helper()
	var b strings.Builder
	b.WriteString("load 15s\n")
	for _, s := range fleet {
		fmt.Fprintf(&b, "  %s{%s} %s\n", s.name, s.labels, s.values)
	}
	env := &promEnv{t: t, st: promqltest.LoadedStorage(t, b.String()), eng: promqltest.NewTestEngineWithOpts(t, promql.EngineOpts{
		MaxSamples: 1e7, Timeout: time.Minute, LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true,
		Parser: parser.NewParser(parser.Options{EnableExperimentalFunctions: true}),
	})}
	env.recordRules()
	return env
}

// recordRules evaluates every recording rule of the shipped rule files
// (alerts/*.rules.yml) once a minute over the fixture (the rules groups'
// interval in a Prometheus with the default global evaluation interval),
// file by file, group by group and rule by rule in file order (a rule sees
// the rules before it at the same instant, as in Prometheus), and stores
// the results.
func (e *promEnv) recordRules() {
	t := e.t
	files, err := filepath.Glob("../alerts/*.rules.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in ../alerts: %v", err)
	}
	var groups []rulefmt.RuleGroup
	for _, f := range files {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		groups = append(groups, rgs.Groups...)
	}
	ctx := context.Background()
	for ts := time.Duration(0); ts <= fixtureEnd; ts += time.Minute {
		for _, g := range groups {
			for _, r := range g.Rules {
				if r.Record == "" {
					continue
				}
				vec := e.instant(r.Expr, ts)
				app := e.st.Appender(ctx)
				for _, smpl := range vec {
					if smpl.H != nil {
						t.Fatalf("rule %s records a histogram", r.Record)
					}
					lb := labels.NewBuilder(smpl.Metric)
					lb.Set(labels.MetricName, r.Record)
					for k, v := range r.Labels {
						lb.Set(k, v)
					}
					if _, err := app.Append(0, lb.Labels(), ts.Milliseconds(), smpl.F); err != nil {
						t.Fatalf("rule %s: %v", r.Record, err)
					}
				}
				if err := app.Commit(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// instant evaluates expr at ts (from the fixture's start).
func (e *promEnv) instant(expr string, ts time.Duration) promql.Vector {
	e.t.Helper()
	q, err := e.eng.NewInstantQuery(context.Background(), e.st, nil, expr, time.UnixMilli(ts.Milliseconds()))
	if err != nil {
		e.t.Fatalf("%s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		e.t.Fatalf("%s: %v", expr, res.Err)
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		return v
	case promql.Scalar:
		return promql.Vector{{F: v.V, T: v.T}}
	default:
		e.t.Fatalf("%s: result %T", expr, res.Value)
		return nil
	}
}

// vars are the values of the dashboard variables in a query: All (".*")
// unless set, and Grafana's intervals.
type vars map[string]string

var varRe = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// substitute writes the variables into expr as Grafana would.
func (v vars) substitute(expr string) string {
	return varRe.ReplaceAllStringFunc(expr, func(m string) string {
		sm := varRe.FindStringSubmatch(m)
		name := sm[1] + sm[2]
		if val, ok := v[name]; ok {
			return val
		}
		switch name {
		case "__rate_interval":
			return "1m"
		case "__interval":
			return "15s"
		case "__range":
			return "30m"
		case "__range_s":
			return "1800"
		case "__range_ms":
			return "1800000"
		}
		if strings.HasPrefix(name, "__") {
			panic("unknown Grafana variable " + m)
		}
		return ".*"
	})
}

// jsonPanel is what these tests read of a panel.
type jsonPanel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	FieldConfig struct {
		Defaults struct {
			Unit     string   `json:"unit"`
			Decimals *float64 `json:"decimals"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

// boardPanel is a panel and the file of its dashboard.
type boardPanel struct {
	file string
	jsonPanel
}

// allPanels reads every non-row panel of the committed dashboards.
func allPanels(t *testing.T) []boardPanel {
	t.Helper()
	var out []boardPanel
	for _, b := range All() {
		raw, err := os.ReadFile(b.File)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []jsonPanel `json:"panels"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		for _, p := range d.Panels {
			if p.Type != "row" {
				out = append(out, boardPanel{b.File, p})
			}
		}
	}
	return out
}

// panelNamed returns the panel titled title (one in all dashboards).
func panelNamed(t *testing.T, title string) boardPanel {
	t.Helper()
	var found []boardPanel
	for _, p := range allPanels(t) {
		if p.Title == title {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d panels titled %q", len(found), title)
	}
	return found[0]
}

// frame is what Grafana makes of one table query's instant result: a Time
// column, one column per label any of its series carries (empty where a
// series lacks it) and "Value #<refId>".
type frame struct {
	fields []string
	rows   []map[string]string
}

func toFrame(refID string, vec promql.Vector) frame {
	names := map[string]bool{"Time": true, "Value #" + refID: true}
	for _, s := range vec {
		s.Metric.Range(func(l labels.Label) { names[l.Name] = true })
	}
	f := frame{}
	for n := range names {
		f.fields = append(f.fields, n)
	}
	sort.Strings(f.fields)
	for _, s := range vec {
		row := map[string]string{"Time": fmt.Sprint(s.T), "Value #" + refID: fmt.Sprint(s.F)}
		s.Metric.Range(func(l labels.Label) { row[l.Name] = l.Value })
		f.rows = append(f.rows, row)
	}
	return f
}

// merge is Grafana's merge transformation (merge.ts): the key is the
// fields every frame has; a row joins an earlier row with the same key
// whose other fields it does not contradict, or else starts a new row.
func merge(frames []frame) (key []string, rows []map[string]string) {
	count := map[string]int{}
	for _, f := range frames {
		for _, n := range f.fields {
			count[n]++
		}
	}
	for n, c := range count {
		if c == len(frames) {
			key = append(key, n)
		}
	}
	sort.Strings(key)
	keyOf := func(r map[string]string) string {
		var b strings.Builder
		for _, k := range key {
			b.WriteString(r[k] + "\x00")
		}
		return b.String()
	}
	byKey := map[string][]int{}
	for _, f := range frames {
		for _, r := range f.rows {
			k := keyOf(r)
			joined := false
			for _, i := range byKey[k] {
				ok := true
				for n, v := range r {
					if old, has := rows[i][n]; has && old != "" && v != "" && old != v {
						ok = false
					}
				}
				if ok {
					for n, v := range r {
						if v != "" {
							rows[i][n] = v
						}
					}
					joined = true
					break
				}
			}
			if !joined {
				cp := map[string]string{}
				for n, v := range r {
					cp[n] = v
				}
				byKey[k] = append(byKey[k], len(rows))
				rows = append(rows, cp)
			}
		}
	}
	return key, rows
}

// table evaluates a table panel's queries at the fixture's end and merges
// them as Grafana does.
func (e *promEnv) table(p boardPanel, v vars) (key []string, rows []map[string]string) {
	var frames []frame
	for _, tg := range p.Targets {
		frames = append(frames, toFrame(tg.RefID, e.instant(v.substitute(tg.Expr), fixtureEnd)))
	}
	return merge(frames)
}
