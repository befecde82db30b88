package alerts

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.yaml.in/yaml/v3"

	"github.com/gpulens/gpulens/internal/promrules"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
	"github.com/gpulens/gpulens/internal/testenv"
)

// Every built-in scenario runs for scenarioSimTime of sim time, compressed
// scenarioSpeed times, scraped as Prometheus scrapes, and the shipped rules
// are evaluated over what was scraped by Prometheus's rule manager
// (scenario_eval_test.go). The compression is a change of time unit applied to everything
// that measures time, so that the alerts fire (or not) exactly as they
// would in real time:
//
//   - the simulator's clock runs scenarioSpeed times faster (--sim.speed),
//     fault delays (a 30 s hang) included;
//   - every duration of the rules is divided by scenarioSpeed: `for:`,
//     `keep_firing_for:`, group intervals, range selectors, offsets, and the
//     constants that are seconds (predict_linear's horizon, a threshold
//     compared with time());
//   - so are the scrape and evaluation intervals (15 s), the engine's
//     lookback delta (5 m), the exporter's probe interval (5 m) and, where
//     a fault delays calls, its device timeout (5 s).
//
// Values per second are the same in both units (utilisation and
// contention are ratios of two counters of the exporter's clock; predict_
// linear's slope and horizon scale inversely). Not scaled: the sampler
// interval (the exporter refuses less than 100 ms; samplerInterval is 10 s
// of sim time instead of 1 s, still more than one read per scrape, to keep
// the exporters' CPU low), and the device timeout of scenarios without
// delayed calls, which only guards against the test machine's hiccups.
// Rewriting only `for:` (as deploy/e2e does to exercise the stack in a
// minute) would not do: a leak's 10-minute regression window or a
// 10-minute average would keep their length while the fault's minutes
// shrank to seconds.
const (
	scenarioSpeed   = 40
	scenarioSimTime = 60 * time.Minute
	// samplerInterval is 10 s of sim time: data at most that old in each
	// 15-second scrape, at a fraction of the CPU of the exporter's floor
	// (100 ms).
	samplerInterval = 250 * time.Millisecond
	// scenarioRuns is how many times a scenario runs at most: once, and
	// again while its check fails in a run the machine disturbed.
	scenarioRuns = 3
)

// wantAlert is one firing episode a scenario must raise: the alert, on a
// GPU ("" for alerts without a gpu label), first firing between from and
// to (sim time), and with through still firing at the end of the run. An
// episode is a run of firing without a gap of a minute.
type wantAlert struct {
	alert, gpu string
	extra      string // the alert's other identifying labels: namespace="research"
	from, to   time.Duration
	through    bool
	// maybe: episodes of the alert on the GPU are allowed, at any time and
	// in any number, but none is required (a GPU whose load, busy with
	// nobody listed, hovers around the threshold at the probes' phase).
	maybe bool
}

// unlistedBusy: GpulensGPUStolenTimeHigh may fire on each of gpus, busy
// with no process NVML lists: the probe takes turns with a context NVML
// cannot name (docs/simulator.md), which is what the alert is for.
func unlistedBusy(gpus ...int) []wantAlert {
	var out []wantAlert
	for _, g := range gpus {
		out = append(out, wantAlert{alert: "GpulensGPUStolenTimeHigh", gpu: strconv.Itoa(g), extra: basisVisible, maybe: true})
	}
	return out
}

// busyUnlisted: GpulensGPUStolenTimeHigh fires on each of gpus from the
// first probes on (pending from the first evaluation, firing 15 minutes
// later) and for good: NVML reports each busy well above 20 % of the time
// with no process listed. Up to 31 min: at 40x, on a loaded machine, the
// figures of the first runs can be unknown (NVML's samples of their windows
// not reached in time: the sample buffer is 250 ms of real time there),
// and pending then starts with the third run (seen: firing at 26.7 and
// 26.8 min at load 12-16).
func busyUnlisted(gpus ...int) []wantAlert {
	var out []wantAlert
	for _, g := range gpus {
		out = append(out, wantAlert{alert: "GpulensGPUStolenTimeHigh", gpu: strconv.Itoa(g), extra: basisVisible, from: minutes(14), to: minutes(31), through: true})
	}
	return out
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// basisVisible is the basis label of the unexplained stolen time the
// simulated GPUs give (NVML shows their per-process utilisation).
const basisVisible = `basis="visible_processes"`

func minutes(m float64) time.Duration { return time.Duration(m * float64(time.Minute)) }

// scenarioAlerts are the alerts every built-in scenario must raise in its
// first hour, each documented in the scenario's header comment and in
// docs/simulator.md. XID alerts are not listed: they follow the seeded XID
// schedule of the simulator (xidSchedule), which the test reads. Nothing
// else may fire.
var scenarioAlerts = map[string][]wantAlert{
	"demo": {
		// batch-train joins llm-serve at 1.5 min for 30 of every 40 minutes.
		{alert: "GpulensGPUHighContention", gpu: "0", from: minutes(11), to: minutes(16)},
		{alert: "GpulensGPUHighContention", gpu: "0", from: minutes(51), to: minutes(56), through: true},
		// The leak: under 25 % free from 11.5 min of each 30-minute run.
		{alert: "GpulensGPUMemoryExhaustionPredicted", gpu: "1", from: minutes(13), to: minutes(17)},
		{alert: "GpulensGPUMemoryExhaustionPredicted", gpu: "1", from: minutes(43), to: minutes(47), through: true},
		// Under 5 % free from 14.9 min of each run, until the restart.
		{alert: "GpulensGPUMemoryHeadroomLow", gpu: "1", from: minutes(23), to: minutes(27)},
		{alert: "GpulensGPUMemoryHeadroomLow", gpu: "1", from: minutes(53), to: minutes(57), through: true},
		// The invisible neighbour in every other probe at the default
		// 5-minute interval: a 30-minute mean of 0.25. When it first passes
		// 0.2 depends on the probes' phase; from 30 min the 30-minute window
		// holds 0.25 whatever the phase, so it fires by 45 min. (make demo
		// probes every 30 s: there it fires at 18 min, as a real-speed run
		// showed; tests/probe-cadence.test.yml.)
		{alert: "GpulensGPUStolenTimeHigh", gpu: "1", extra: basisVisible, from: minutes(15), to: minutes(47), through: true},
		// GPU 3's PCIe replay counter read fails from 2 min.
		{alert: "GpulensNVMLCallsFailing", from: minutes(16), to: minutes(20), through: true},
	},
	"busy-neighbour": {
		// GPU 0: the unexplained ratio is ~0 until the neighbour joins at
		// 15 min, ~0.5 after; its 30-minute mean passes 0.2 at ~27 min.
		// GPU 1 (the tenant's own job only) stays silent.
		{alert: "GpulensGPUStolenTimeHigh", gpu: "0", extra: basisVisible, from: minutes(38), to: minutes(47), through: true},
	},
	"dgx-h100": append(busyUnlisted(0, 1, 2, 3), unlistedBusy(4, 5, 6, 7)...),
	"fleet":    unlistedBusy(seq(64)...),
	"minimal":  busyUnlisted(0),
	"faulty": append(
		// GPUs 0 and 1: busy with nobody listed (sine 30-90 %), every probe
		// reads about 0.3 or more, as busyUnlisted. (It had until 21 min:
		// the first run is in sim time zero, before the scrapes, and the
		// second's figures came 2.7 min late, at 6.7 min, beside a second
		// make test: firing at 21.7 min.)
		busyUnlisted(0, 1),
		// Hung and lost GPUs: whether NVML's process samples were read
		// around a probe depends on the hangs.
		wantAlert{alert: "GpulensGPUStolenTimeHigh", gpu: "2", extra: basisVisible, maybe: true},
		wantAlert{alert: "GpulensGPUStolenTimeHigh", gpu: "3", extra: basisVisible, maybe: true},
		// Hangs from the start (up only between hung calls).
		wantAlert{alert: "GpulensGPULost", gpu: "2", from: 0, to: minutes(5), through: true},
		// Falls off the bus at 45 s: GpulensGPULost only.
		wantAlert{alert: "GpulensGPULost", gpu: "3", from: minutes(2), to: minutes(5), through: true},
		// GPU 1's GetPowerUsage and GetTotalEccErrors fail from the start.
		wantAlert{alert: "GpulensNVMLCallsFailing", from: minutes(15), to: minutes(19), through: true},
	),
	"noisy-neighbour": {
		{alert: "GpulensGPUHighContention", gpu: "0", from: minutes(11), to: minutes(16), through: true},
	},
	"rented-throttled": {
		// Throttled from the start: pending from the first evaluation that
		// sees data, which can be one evaluation (15 s of sim time) before
		// the test's sim time zero now that each alert is evaluated in the
		// group of the record it reads (no evaluation of lag); firing
		// `for` later.
		{alert: "GpulensGPUThermalThrottling", gpu: "0", from: minutes(9.5), to: minutes(15), through: true},
		{alert: "GpulensGPUPowerThrottling", gpu: "0", from: minutes(29.5), to: minutes(36), through: true},
	},
	"rented-timesliced": {
		// The neighbour in 3 of every 6 five-minute runs (a 6-minute
		// cycle): once the 30-minute window is full its mean is 0.25 at
		// any phase, so it fires by 45 min and stays firing; when it
		// first passes 0.2 depends on the runs' phase (the exporters start
		// a few sim seconds before the test's clock), from 14 min. Up to
		// 55: at 40x NVML's sample buffer (10 s of sim time) is 250 ms of
		// real time, and a loaded machine can leave one run's figure
		// unknown (no samples reached), which holds the mean under 0.2 a
		// run longer (seen: 50.8 and 51.9 min, at load 12-16). It must
		// fire within the hour and be firing at its end.
		{alert: "GpulensGPUStolenTimeHigh", gpu: "0", extra: basisVisible, from: minutes(14), to: minutes(55), through: true},
	},
	"starved-loader": {
		// GPU 0's process keeps a core busy while the GPU is ~25 % busy: the
		// process's 5-minute rate passes 0.9 cores at ~4.5 min, then 10
		// minutes pending. It stops when the job restarts with loader
		// workers at 30 min. GPU 1 (busy GPU, idle CPU) stays silent.
		{alert: "GpulensGPUInputBound", gpu: "0", extra: `cause="process_cpu"`, from: minutes(13), to: minutes(18)},
	},
	"vram-leak": {
		// Under 25 % free from 15.4 min of each 20-minute run: one alert
		// through the restarts at 20 and 40 min.
		{alert: "GpulensGPUMemoryExhaustionPredicted", gpu: "0", from: minutes(17), to: minutes(21), through: true},
	},
}

// scaledRules copies the rule files into dir with every duration divided by
// k (see scenarioSpeed).
func scaledRules(t *testing.T, dir string, k int) {
	t.Helper()
	if err := promrules.CopyFiles(ruleFiles, dir, promrules.Scale(k)); err != nil {
		t.Fatal(err)
	}
}

// scaledArg formats d/k as a Go flag value (7.5s).
func scaledArg(d time.Duration, k int) string { return (d / time.Duration(k)).String() }

// cpuSeconds is the CPU time process pid has used so far (Linux; 0 where
// /proc cannot tell).
func cpuSeconds(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (in parentheses): utime and stime
	// are the 12th and 13th, in clock ticks (100 per second on Linux).
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// episode is a run of an alert's state without a gap of a minute of sim time.
type episode struct {
	alert, gpu, extra string
	start, end        time.Duration // sim time
}

func (e episode) String() string {
	gpu := ""
	if e.gpu != "" {
		gpu = " gpu " + e.gpu
	}
	if e.extra != "" {
		gpu += " " + e.extra
	}
	return fmt.Sprintf("%s%s %s–%s", e.alert, gpu, fmtMin(e.start), fmtMin(e.end))
}

// notIdentifying are the labels of an ALERTS series that do not tell two
// alerts of a scenario apart.
var notIdentifying = map[string]bool{"__name__": true, "alertname": true, "alertstate": true, "severity": true,
	"cluster": true, "instance": true, "job": true, "gpu": true, "uuid": true}

// extraLabels writes the identifying labels other than gpu, sorted.
func extraLabels(m map[string]string) string {
	var out []string
	for k, v := range m {
		if !notIdentifying[k] {
			out = append(out, fmt.Sprintf("%s=%q", k, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func fmtMin(d time.Duration) string { return fmt.Sprintf("%.1fm", d.Minutes()) }

// point is one raw sample, at a sim time.
type point struct {
	t time.Duration
	v float64
}

type rawSeries struct {
	metric map[string]string
	points []point
}

// episodesOf turns ALERTS series into episodes by scenario (the cluster
// label).
func episodesOf(series []rawSeries) map[string][]episode {
	gap := time.Minute
	out := map[string][]episode{}
	for _, s := range series {
		sc := s.metric["cluster"]
		var cur *episode
		for _, p := range s.points {
			if cur != nil && p.t-cur.end <= gap {
				cur.end = p.t
				continue
			}
			if cur != nil {
				out[sc] = append(out[sc], *cur)
			}
			cur = &episode{alert: s.metric["alertname"], gpu: s.metric["gpu"], extra: extraLabels(s.metric), start: p.t, end: p.t}
		}
		if cur != nil {
			out[sc] = append(out[sc], *cur)
		}
	}
	for _, eps := range out {
		sort.Slice(eps, func(i, j int) bool {
			if eps[i].alert != eps[j].alert {
				return eps[i].alert < eps[j].alert
			}
			if eps[i].gpu != eps[j].gpu {
				return eps[i].gpu < eps[j].gpu
			}
			if eps[i].extra != eps[j].extra {
				return eps[i].extra < eps[j].extra
			}
			return eps[i].start < eps[j].start
		})
	}
	return out
}

// xidEvent is one XID of a scenario's schedule.
type xidEvent struct {
	at   time.Duration
	gpu  string
	code uint64
}

// xidSchedule lists the XIDs a scenario's simulator delivers in its first
// `until` (seed 1, the exporter's default): the faults' and the random
// ones, by GPU index.
func xidSchedule(t *testing.T, scenario string, until time.Duration) []xidEvent {
	t.Helper()
	sc, err := gpusim.Load(scenario)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 0)
	clock := start
	f, err := gpusim.New(sc, gpusim.Options{Seed: 1, Start: start, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	lib := f.Interface()
	if r := lib.Init(); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	defer lib.Shutdown()
	set, r := lib.EventSetCreate()
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	defer set.Free()
	n, _ := lib.DeviceGetCount()
	index := map[nvml.Device]int{}
	for i := 0; i < n; i++ {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			t.Fatalf("%s: GPU %d: %v", scenario, i, r)
		}
		index[d] = i
		if r := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); r != nvml.SUCCESS {
			t.Fatalf("%s: GPU %d: RegisterEvents %v", scenario, i, r)
		}
	}
	var out []xidEvent
	for s := time.Second; s <= until; s += time.Second {
		clock = start.Add(s)
		for {
			ev, r := set.Wait(0)
			if r != nvml.SUCCESS {
				break
			}
			out = append(out, xidEvent{at: s, gpu: strconv.Itoa(index[ev.Device]), code: ev.EventData})
		}
	}
	return out
}

// xidAlertOf is the alert an XID code raises: "" for 79 (GpulensGPULost
// pages for a GPU that fell off the bus).
func xidAlertOf(code uint64, critical map[uint64]bool) string {
	switch {
	case code == 79:
		return ""
	case critical[code]:
		return "GpulensGPUXIDCriticalError"
	default:
		return "GpulensGPUXIDApplicationError"
	}
}

var criticalXidRe = regexp.MustCompile(`xid=~"([0-9|]+)"`)

// criticalXids reads the codes of the critical XID alert from the rules.
func criticalXids(t *testing.T) map[uint64]bool {
	t.Helper()
	_, alerts := loadRules(t)
	for _, a := range alerts {
		if a.Alert != "GpulensGPUXIDCriticalError" {
			continue
		}
		m := criticalXidRe.FindStringSubmatch(a.Expr)
		if m == nil {
			t.Fatalf("no xid=~ list in %s", a.Expr)
		}
		out := map[uint64]bool{}
		for _, c := range strings.Split(m[1], "|") {
			v, _ := strconv.ParseUint(c, 10, 64)
			out[v] = true
		}
		return out
	}
	t.Fatal("no GpulensGPUXIDCriticalError rule")
	return nil
}

// TestScenarioAlerts runs every built-in scenario for an hour of sim time
// in about a minute and a half (see scenarioSpeed) against the pinned
// Prometheus and the shipped rules, and checks that the alerts each scenario
// documents fire, when documented, once each, and that nothing else fires.
// A scenario whose check fails while the test machine disturbed its run (a
// failed scrape, a scrape loop or rule evaluation that stalled: at this
// speed a second's stall is 40 s of sim time) runs again, at most
// scenarioRuns times in all; the last run decides. A scenario whose check
// fails in a run the machine did not disturb fails at once: a disturbance
// excuses nothing else.
func TestScenarioAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every scenario against Prometheus for about a minute and a half")
	}
	// The runs may take what the test binary's -test.timeout leaves, less
	// a minute to report: under a second make test three runs took 9.5 min
	// (the rules' evaluation after each 1.5-2 min), and a fixed 9-minute
	// budget failed the third run's every rule as "query timed out".
	budget := 20 * time.Minute
	if d, ok := t.Deadline(); ok {
		budget = time.Until(d) - time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	exporterBin := testenv.Binaries(t, "gpulens-exporter")[0]
	rulesDir := filepath.Join(t.TempDir(), "rules")
	if err := os.Mkdir(rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	scaledRules(t, rulesDir, scenarioSpeed)
	critical := criticalXids(t)
	scenarios := scenariosToRun(gpusim.BuiltinNames())
	xids := map[string][]xidEvent{}
	for _, sc := range scenarios {
		xids[sc] = xidSchedule(t, sc, scenarioSimTime)
	}
	check := func(sc string, run *scenarioRun) []string {
		return checkEpisodes(run.firing[sc], scenarioAlerts[sc], xids[sc], critical)
	}

	runs := map[string]*scenarioRun{}
	again := scenarios
	deadline, _ := ctx.Deadline()
	for attempt := 1; len(again) > 0; attempt++ {
		began := time.Now()
		run := runScenarios(ctx, t, exporterBin, rulesDir, again)
		took := time.Since(began)
		var disturbed []string
		for _, sc := range again {
			runs[sc] = run
			if len(check(sc, run)) > 0 && len(run.disturbed[sc]) > 0 {
				disturbed = append(disturbed, sc)
			}
		}
		again = nil
		if len(disturbed) > 0 && attempt < scenarioRuns && time.Until(deadline) < took {
			t.Logf("not running %v again: the last run took %s, %s is left of the test's time", disturbed, took.Round(time.Second), time.Until(deadline).Round(time.Second))
		} else if len(disturbed) > 0 && attempt < scenarioRuns {
			t.Logf("running %v again (run %d of at most %d): their checks failed in a run the machine disturbed", disturbed, attempt+1, scenarioRuns)
			again = disturbed
		}
	}
	for _, sc := range scenarios {
		t.Run(sc, func(t *testing.T) {
			run := runs[sc]
			xidAlerts := map[string]bool{}
			for _, x := range xids[sc] {
				if a := xidAlertOf(x.code, critical); a != "" {
					xidAlerts[a] = true
				}
			}
			for _, p := range checkHeader(t, sc, scenarioAlerts[sc], xidAlerts) {
				t.Error(p)
			}
			for _, e := range run.firing[sc] {
				t.Logf("firing  %s", e)
			}
			for _, e := range run.pending[sc] {
				t.Logf("pending %s", e)
			}
			for _, x := range xids[sc] {
				t.Logf("XID %d on GPU %s at %s", x.code, x.gpu, fmtMin(x.at))
			}
			for _, d := range run.disturbed[sc] {
				t.Logf("disturbed: %s", d)
			}
			for _, p := range check(sc, run) {
				t.Error(p)
			}
		})
	}
}

// scenariosToRun are the scenarios whose subtest -run selects: all, unless
// the pattern has a second level (`-run 'TestScenarioAlerts/starved-loader'`
// starts that scenario's exporter alone).
func scenariosToRun(all []string) []string {
	f := flag.Lookup("test.run")
	if f == nil {
		return all
	}
	_, sub, ok := strings.Cut(f.Value.String(), "/")
	if !ok || sub == "" {
		return all
	}
	sub, _, _ = strings.Cut(sub, "/")
	re, err := regexp.Compile(sub)
	if err != nil {
		return all
	}
	var out []string
	for _, sc := range all {
		if re.MatchString(sc) {
			out = append(out, sc)
		}
	}
	return out
}

// scenarioRun is what one Prometheus saw of some scenarios.
type scenarioRun struct {
	firing, pending map[string][]episode
	// disturbed lists, by scenario, what the test machine got wrong:
	// failed scrapes and stalled scrape loops, in sim time.
	disturbed map[string][]string
}

// runScenarios runs the scenarios for scenarioSimTime of sim time, each
// with its exporter, scraped by a scrapeLoop, then stops them all and
// evaluates the rules of rulesDir over what was scraped (scenario_eval_test.go).
func runScenarios(ctx context.Context, t *testing.T, exporterBin, rulesDir string, scenarios []string) *scenarioRun {
	t.Helper()
	const k = scenarioSpeed
	began := time.Now()
	// Sim time zero for every exporter, once they are up (until then sim
	// time stays 0).
	t0 := began.Add(4 * time.Second)
	start := fmt.Sprintf("%d.%09d", t0.Unix(), t0.Nanosecond())
	exporters := map[string]*testenv.Process{}
	for _, sc := range scenarios {
		// The device timeout (5 s) is scaled where a fault delays calls
		// (faulty's 30 s hang); elsewhere no call takes sim time, and the
		// default keeps a scheduling hiccup of the test machine (125 ms of
		// real time would be 5 s) from reading as a hung GPU.
		timeout := "5s"
		if hasDelayFaults(t, sc) {
			timeout = scaledArg(5*time.Second, k)
		}
		exporters[sc] = testenv.Run(t, exporterBin,
			"--sim.scenario="+sc, "--sim.speed="+strconv.Itoa(k), "--sim.start="+start,
			"--sampler.interval="+samplerInterval.String(), "--sampler.device-timeout="+timeout,
			// No jitter: the scenarios' expected alerts follow from probes
			// every 5 minutes exactly (their headers work them out); with
			// the default ±20 % a neighbour active half of each cycle is
			// seen in a random share of a 30-minute window's six runs, and
			// the alert flaps as it would on a real node (the jitter's
			// purpose, a load locked onto the interval, is tested in
			// collector: TestProbeJitterSpreadsPhases).
			"--collector.probe", "--collector.probe.interval="+scaledArg(5*time.Minute, k), "--collector.probe.interval-jitter=0",
			"--web.listen-address=127.0.0.1:0")
	}
	addrs := map[string]string{}
	for _, sc := range scenarios {
		addrs[sc] = exporters[sc].MustAddress(ctx, t)
	}
	if time.Now().After(t0) {
		t.Logf("exporters up %s after sim time zero; the first minutes of sim time are partly unscraped", time.Since(t0).Round(time.Millisecond))
	}
	t.Logf("%d exporters up %s after start", len(scenarios), time.Since(began).Round(time.Millisecond))

	end := t0.Add(scenarioSimTime / k)
	loop := newScrapeLoop(t, 15*time.Second/k, t0)
	var wg sync.WaitGroup
	for _, sc := range scenarios {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop.run(ctx, sc, addrs[sc], end)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
	for sc, c := range exporters {
		if c.Exited() {
			t.Errorf("exporter %s exited during the run", sc)
		}
	}
	var cpu []string
	for _, sc := range scenarios {
		cpu = append(cpu, fmt.Sprintf("%s %.1fs", sc, cpuSeconds(exporters[sc].Pid())))
	}
	for _, c := range exporters {
		_ = c.Stop()
	}
	scraped := time.Since(began)
	run := &scenarioRun{disturbed: loop.disturbances(k)}
	run.firing, run.pending = loop.evaluateRules(ctx, t, rulesDir, 15*time.Second/k, end, k)
	t.Logf("ran %s of sim time in %s, rules evaluated in %s; CPU time of the exporters: %s", scenarioSimTime,
		scraped.Round(100*time.Millisecond), (time.Since(began) - scraped).Round(100*time.Millisecond), strings.Join(cpu, ", "))
	return run
}

// checkEpisodes compares a scenario's firing episodes with its expected
// alerts and XID schedule and returns the differences.
func checkEpisodes(got []episode, want []wantAlert, xids []xidEvent, critical map[uint64]bool) []string {
	var problems []string
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	used := make([]bool, len(got))
	for _, w := range want {
		if w.maybe {
			for i, e := range got {
				if e.alert == w.alert && e.gpu == w.gpu && e.extra == w.extra {
					used[i] = true
				}
			}
			continue
		}
		found := false
		for i, e := range got {
			if !used[i] && e.alert == w.alert && e.gpu == w.gpu && e.extra == w.extra && e.start >= w.from && e.start <= w.to {
				used[i], found = true, true
				if w.through && e.end < scenarioSimTime-2*time.Minute {
					errorf("%s stopped firing at %s; it must fire to the end", e, fmtMin(e.end))
				}
				break
			}
		}
		if !found {
			what := w.alert + " on GPU " + strconv.Quote(w.gpu)
			if w.extra != "" {
				what += " " + w.extra
			}
			errorf("missing: %s first firing between %s and %s", what, fmtMin(w.from), fmtMin(w.to))
		}
	}
	// XID alerts: fire within two minutes of each XID of their class, and
	// only then.
	const latency = 2 * time.Minute
	for _, x := range xids {
		alert := xidAlertOf(x.code, critical)
		if alert == "" || x.at > scenarioSimTime-latency {
			continue
		}
		found := false
		for _, e := range got {
			if e.alert == alert && e.gpu == x.gpu && e.start <= x.at+latency && e.end >= x.at {
				found = true
			}
		}
		if !found {
			errorf("missing: %s on GPU %s for XID %d at %s", alert, x.gpu, x.code, fmtMin(x.at))
		}
	}
	for i, e := range got {
		if used[i] {
			continue
		}
		if strings.HasPrefix(e.alert, "GpulensGPUXID") {
			explained := false
			for _, x := range xids {
				if xidAlertOf(x.code, critical) == e.alert && x.gpu == e.gpu && e.start >= x.at && e.start <= x.at+latency {
					explained = true
				}
			}
			if explained {
				continue
			}
		}
		errorf("unexpected: %s", e)
	}
	return problems
}

// scenarioFile is a built-in scenario's YAML.
func scenarioFile(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "internal", "sim", "gpusim", "scenarios", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// hasDelayFaults reports whether a scenario delays NVML calls (slow or
// hang faults).
func hasDelayFaults(t *testing.T, name string) bool {
	t.Helper()
	var sc struct {
		Faults []struct {
			Kind string `yaml:"kind"`
		} `yaml:"faults"`
	}
	if err := yaml.Unmarshal(scenarioFile(t, name), &sc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, f := range sc.Faults {
		if f.Kind == "slow" || f.Kind == "hang" {
			return true
		}
	}
	return false
}

// checkHeader: a scenario's header comment documents its alerts (each
// expected one by name, "Alerts: none" for a silent scenario, the XID
// alerts its XIDs raise).
func checkHeader(t *testing.T, name string, want []wantAlert, xidAlerts map[string]bool) []string {
	t.Helper()
	var problems []string
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var header strings.Builder
	for _, line := range strings.Split(string(scenarioFile(t, name)), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		header.WriteString(strings.TrimSpace(strings.TrimPrefix(line, "#")) + "\n")
	}
	h := header.String()
	if !strings.Contains(h, "Alerts") {
		errorf("%s.yaml: the header comment has no Alerts section", name)
	}
	if len(want) == 0 && len(xidAlerts) == 0 && !strings.Contains(h, "Alerts: none") {
		errorf("%s.yaml: a scenario that raises no alert says \"Alerts: none\" in its header", name)
	}
	for _, w := range want {
		if !strings.Contains(h, w.alert) {
			errorf("%s.yaml: the header does not document %s", name, w.alert)
		}
	}
	for a := range xidAlerts {
		if !strings.Contains(h, a) {
			errorf("%s.yaml: the header does not document %s for its XIDs", name, a)
		}
	}
	return problems
}

// TestCheckEpisodes: the comparison of firing episodes with a scenario's
// expectations finds a missing, a late, a short, a second and an
// unexplained alert, and matches XID alerts to the XID schedule.
func TestCheckEpisodes(t *testing.T) {
	want := []wantAlert{
		{alert: "A", gpu: "0", from: minutes(10), to: minutes(12), through: true},
		{alert: "B", gpu: "1", from: minutes(20), to: minutes(22)},
	}
	xids := []xidEvent{{at: minutes(5), gpu: "2", code: 13}, {at: minutes(30), gpu: "2", code: 79}}
	critical := map[uint64]bool{48: true}
	ok := []episode{
		{alert: "A", gpu: "0", start: minutes(11), end: minutes(60)},
		{alert: "B", gpu: "1", start: minutes(21), end: minutes(25)},
		{alert: "GpulensGPUXIDApplicationError", gpu: "2", start: minutes(5.5), end: minutes(15)},
	}
	if p := checkEpisodes(ok, want, xids, critical); len(p) != 0 {
		t.Errorf("matching episodes: %v", p)
	}
	bad := []episode{
		{alert: "A", gpu: "0", start: minutes(11), end: minutes(40)},                             // stops early
		{alert: "B", gpu: "1", start: minutes(23), end: minutes(25)},                             // late
		{alert: "C", gpu: "3", start: minutes(1), end: minutes(2)},                               // not expected
		{alert: "GpulensGPUXIDApplicationError", gpu: "2", start: minutes(40), end: minutes(50)}, // no XID then
	}
	got := strings.Join(checkEpisodes(bad, want, xids, critical), "\n")
	for _, w := range []string{
		"A gpu 0 11.0m–40.0m stopped firing at 40.0m",
		`missing: B on GPU "1" first firing between 20.0m and 22.0m`,
		"unexpected: B gpu 1 23.0m–25.0m",
		"unexpected: C gpu 3 1.0m–2.0m",
		"missing: GpulensGPUXIDApplicationError on GPU 2 for XID 13 at 5.0m",
		"unexpected: GpulensGPUXIDApplicationError gpu 2 40.0m–50.0m",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("problems lack %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "XID 79") {
		t.Errorf("XID 79 expects no XID alert (GpulensGPULost pages):\n%s", got)
	}
}
