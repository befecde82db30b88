package compare

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-4*math.Max(1, math.Abs(b)) }

func TestWelchTest(t *testing.T) {
	// Hand-computed: A = {10, 12, 14}: mean 12, sd 2.
	a := report.Stat{N: 3, Mean: 12, Stddev: 2}
	for _, tc := range []struct {
		name          string
		a, b          report.Stat
		t, df, crit   float64
		sig, testable bool
	}{
		// B = {20, 22, 24}: t = 10 / sqrt(4/3 + 4/3) = 6.1237, df = 4,
		// t(0.975, 4) = 2.776.
		{"clearly apart", a, report.Stat{N: 3, Mean: 22, Stddev: 2}, 6.1237, 4, 2.776, true, true},
		// B = {17, 19, 21}: t = 7 / 1.63299 = 4.2866 > 2.776 although the
		// 95 % CIs overlap (A ≤ 16.97, B ≥ 14.03): overlapping intervals
		// do not mean "same".
		{"apart, CIs overlapping", a, report.Stat{N: 3, Mean: 19, Stddev: 2}, 4.2866, 4, 2.776, true, true},
		// B = {11, 13, 15}: t = 1 / 1.63299 = 0.6124.
		{"within the noise", a, report.Stat{N: 3, Mean: 13, Stddev: 2}, 0.6124, 4, 2.776, false, true},
		// A = {1, 2, 3} (sd 1), B = {2, 6, 10, 14} (mean 8, sd √(80/3)):
		// se² = 1/3 + 20/3 = 7, t = 6/√7 = 2.2678, df = 49 / ((1/3)²/2 +
		// (20/3)²/3) = 3.2951 → 3 → 3.182: not significant (a normal
		// approximation, |t| > 1.96, would say it is).
		{"unequal variances", report.Stat{N: 3, Mean: 2, Stddev: 1}, report.Stat{N: 4, Mean: 8, Stddev: math.Sqrt(80.0 / 3)}, 2.2678, 3.2951, 3.182, false, true},
		// A = {9, 10, 10, 10, 10, 11} (mean 10, sd √0.4), B = {10, 16, 22}
		// (mean 16, sd 6): se² = 0.4/6 + 36/3, t = 6/√12.0667 = 1.7273,
		// df = 12.0667² / ((0.4/6)²/5 + 12²/2) = 2.0223 → 2 → 4.303: not
		// significant. A pooled-variance t-test would call it significant
		// (s² = (5·0.4 + 2·36)/7, t = 2.6098 > 2.365 at 7 df): it lets the
		// many quiet repeats of A hide the noise of B's few.
		{"unequal variances and counts", report.Stat{N: 6, Mean: 10, Stddev: math.Sqrt(0.4)}, report.Stat{N: 3, Mean: 16, Stddev: 6}, 1.7273, 2.0223, 4.303, false, true},
		{"lower B", report.Stat{N: 3, Mean: 22, Stddev: 2}, a, -6.1237, 4, 2.776, true, true},
		{"single run", report.Stat{N: 1, Mean: 12}, a, 0, 0, 0, false, false},
		{"no spread", report.Stat{N: 3, Mean: 12}, report.Stat{N: 3, Mean: 13}, 0, 0, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, sig, ok := WelchTest(tc.a, tc.b)
			if ok != tc.testable || sig != tc.sig {
				t.Fatalf("ok %v sig %v, want %v %v (%+v)", ok, sig, tc.testable, tc.sig, w)
			}
			if ok && (!approx(w.T, tc.t) || !approx(w.DF, tc.df) || w.Critical != tc.crit) {
				t.Errorf("t %.4f df %.4f crit %v, want %.4f %.4f %v", w.T, w.DF, w.Critical, tc.t, tc.df, tc.crit)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	tput, ttft := Metrics[0], Metrics[3]
	if tput.Better != Higher || ttft.Better != Lower || ttft.Key != "ttft_seconds.p50" {
		t.Fatalf("metric table changed: %+v %+v", tput, ttft)
	}
	lo, hi := report.Stat{N: 3, Mean: 12, Stddev: 2}, report.Stat{N: 3, Mean: 22, Stddev: 2}
	for _, tc := range []struct {
		name         string
		m            Metric
		a, b         report.Stat
		verdict, win string
		rel          float64
		welch        bool
		text         string
	}{
		{"higher throughput wins", tput, lo, hi, VerdictDifferent, "b.json", 10.0 / 12, true, "B better: larger than the noise (Welch t=6.12, df=4.0, |t| > 2.776)"},
		{"lower latency wins", ttft, lo, hi, VerdictDifferent, "a.json", 10.0 / 12, true, "A better: larger than the noise"},
		{"B faster", ttft, hi, lo, VerdictDifferent, "b.json", -10.0 / 22, true, "B better"},
		{"noise", tput, lo, report.Stat{N: 3, Mean: 13, Stddev: 2}, VerdictNoise, "", 1.0 / 12, true, "within the noise (Welch t=0.61, df=4.0, |t| ≤ 2.776)"},
		{"single runs", tput, report.Stat{N: 1, Mean: 12}, report.Stat{N: 1, Mean: 22}, VerdictNoRepeats, "", 10.0 / 12, false, "no repeats: cannot tell noise"},
		{"one side single", tput, report.Stat{N: 1, Mean: 12}, hi, VerdictNoRepeats, "", 10.0 / 12, false, "no repeats: cannot tell noise"},
		{"no spread, equal", tput, report.Stat{N: 3, Mean: 5}, report.Stat{N: 2, Mean: 5}, VerdictEqual, "", 0, false, "equal"},
		{"no spread, apart", ttft, report.Stat{N: 3, Mean: 5}, report.Stat{N: 2, Mean: 4}, VerdictDifferent, "b.json", -0.2, false, "B better: larger than the noise (no spread in the repeats)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Judge(tc.m, tc.a, tc.b, "a.json", "b.json")
			if c.Verdict != tc.verdict || c.Winner != tc.win || !approx(c.RelativeDifference, tc.rel) || (c.Welch != nil) != tc.welch {
				t.Errorf("got %s winner %q rel %v welch %v; want %s %q %v %v", c.Verdict, c.Winner, c.RelativeDifference, c.Welch != nil, tc.verdict, tc.win, tc.rel, tc.welch)
			}
			if got := c.VerdictText("A", "B"); !strings.HasPrefix(got, tc.text) {
				t.Errorf("text %q, want it to start with %q", got, tc.text)
			}
			if c.Difference != tc.b.Mean-tc.a.Mean {
				t.Errorf("difference %v", c.Difference)
			}
		})
	}
}

// rep is one repeat's measurements.
type rep struct {
	tput, ttftP99, vramGiB, tokPerJ, per1k float64
}

// sweep builds a closed-loop report: per level its repeats (and, with
// more than one, the aggregate loadgen/stats computes).
func sweep(model string, levels map[float64][]rep, price float64, gpuSide bool) *report.Document {
	d := &report.Document{Metadata: report.Metadata{Model: model}}
	for _, l := range []float64{1, 4, 16, 64} {
		reps, ok := levels[l]
		if !ok {
			continue
		}
		var runs []report.Run
		for i, r := range reps {
			run := report.Run{Name: "run", Level: l, Repeat: i + 1,
				Settings: report.Settings{Mode: "closed", Concurrency: int(l), MaxTokens: 128, Seed: 1, Model: model,
					Cost: report.CostSettings{GPUHourlyUSD: price, GPUs: 1}},
				Summary: report.Summary{RequestsCompleted: 100, RequestThroughput: r.tput, OutputTokensPerSecond: 100 * r.tput,
					GoodputPerSecond: r.tput, TTFT: report.Dist{Count: 100, P50: r.ttftP99 / 2, P99: r.ttftP99}, ITL: report.Dist{Count: 3100, P50: 0.01, P99: 0.02},
					Cost: report.Cost{Per1kRequestsUSD: r.per1k}}}
			if gpuSide {
				run.GPU = &report.RunGPU{Samples: 5, PeakMemoryUsedBytes: r.vramGiB * (1 << 30), OutputTokensPerJoule: r.tokPerJ}
			}
			runs = append(runs, run)
		}
		d.Runs = append(d.Runs, runs...)
		if len(runs) > 1 {
			d.Runs = append(d.Runs, stats.Aggregate(runs))
		}
	}
	return d
}

func find(t *testing.T, l Level, key string) Comparison {
	t.Helper()
	for _, c := range l.Metrics {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("level %s has no metric %s", l.Label, key)
	return Comparison{}
}

func TestCompareSweeps(t *testing.T) {
	// A: an H100-like host, B: an L4-like one, 3 repeats per level.
	a := sweep("llama", map[float64][]rep{
		1: {{10, 0.10, 40, 2.0, 0.05}, {12, 0.12, 40, 2.2, 0.04}, {14, 0.14, 40, 2.4, 0.03}},
		4: {{40, 0.20, 42, 3, 0.02}, {41, 0.21, 42, 3, 0.02}, {42, 0.22, 42, 3, 0.02}},
		// only in A
		64: {{100, 1, 50, 5, 0.01}, {100, 1, 50, 5, 0.01}},
	}, 2.5, true)
	b := sweep("llama", map[float64][]rep{
		1:  {{20, 0.30, 20, 4.0, 0.05}, {22, 0.31, 20, 4.4, 0.04}, {24, 0.32, 20, 4.8, 0.03}},
		4:  {{40, 0.30, 21, 3, 0.02}, {42, 0.31, 21, 3, 0.03}, {44, 0.32, 21, 3, 0.04}},
		16: {{10, 1, 1, 1, 1}},
	}, 0.8, true)
	res, err := Compare([]Input{{Name: "h100.json", Doc: a}, {Name: "l4.json", Doc: b}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pairs) != 1 {
		t.Fatalf("%d pairs", len(res.Pairs))
	}
	p := res.Pairs[0]
	if p.A != "h100.json" || p.B != "l4.json" || len(p.Levels) != 2 || p.Levels[0].Label != "c=1" || p.Levels[1].Label != "c=4" {
		t.Fatalf("pair: %+v", p)
	}
	if len(p.OnlyInA) != 1 || p.OnlyInA[0] != 64 || len(p.OnlyInB) != 1 || p.OnlyInB[0] != 16 {
		t.Errorf("only in A %v, only in B %v; want [64] and [16]", p.OnlyInA, p.OnlyInB)
	}
	l1 := p.Levels[0]
	// Throughput at c=1: A {10,12,14} vs B {20,22,24} (from the
	// aggregate's Stats): t = 6.1237, B better.
	tp := find(t, l1, "request_throughput_per_second")
	if tp.A.Mean != 12 || !approx(tp.A.Stddev, 2) || !approx(tp.A.CI95High, 12+4.303*2/math.Sqrt(3)) || tp.B.Mean != 22 {
		t.Errorf("throughput stats %+v %+v", tp.A, tp.B)
	}
	if tp.Verdict != VerdictDifferent || tp.Winner != "l4.json" || !approx(tp.Welch.T, 6.1237) {
		t.Errorf("throughput: %+v", tp)
	}
	// TTFT p99: A {0.10,0.12,0.14} (sd 0.02) vs B {0.30,0.31,0.32} (sd
	// 0.01): t = 0.19/sqrt(0.0004/3+0.0001/3) = 14.7173, df = 2.9412 → 2
	// → 4.303; A better.
	tt := find(t, l1, "ttft_seconds.p99")
	if tt.Verdict != VerdictDifferent || tt.Winner != "h100.json" || !approx(tt.Welch.T, 14.7173) || !approx(tt.Welch.DF, 2.9412) || tt.Welch.Critical != 4.303 {
		t.Errorf("TTFT p99: %+v", tt)
	}
	// Peak VRAM from the repeats' GPU side (no Stats for it): 40 vs 20
	// GiB, no spread: B better (lower).
	vr := find(t, l1, "gpu.peak_memory_used_bytes")
	if vr.A.N != 3 || vr.A.Mean != 40*(1<<30) || vr.Verdict != VerdictDifferent || vr.Winner != "l4.json" || vr.Welch != nil {
		t.Errorf("peak VRAM: %+v", vr)
	}
	// tokens/J: {2.0,2.2,2.4} (sd 0.2) vs {4.0,4.4,4.8} (sd 0.4):
	// t = 2.2/sqrt(0.04/3+0.16/3) = 8.5206, df = (0.2/3)² /
	// ((0.04/3)²/2 + (0.16/3)²/2) = 2.9412 → 2 → 4.303; B better.
	tj := find(t, l1, "gpu.output_tokens_per_joule")
	if tj.Verdict != VerdictDifferent || tj.Winner != "l4.json" || !approx(tj.Welch.T, 8.5206) || !approx(tj.Welch.DF, 2.9412) || tj.Welch.Critical != 4.303 {
		t.Errorf("tokens/J: %+v %+v", tj, tj.Welch)
	}
	// Cost per 1,000: the same values on both sides: t = 0.
	c1k := find(t, l1, "cost.per_1k_requests_usd")
	if c1k.Verdict != VerdictNoise || c1k.Welch.T != 0 {
		t.Errorf("cost: %+v", c1k)
	}
	// c=4 throughput: {40,41,42} (sd 1) vs {40,42,44} (sd 2): t = 1/sqrt(1/3+4/3) = 0.7746.
	if c := find(t, p.Levels[1], "request_throughput_per_second"); c.Verdict != VerdictNoise || !approx(c.Welch.T, 0.7746) {
		t.Errorf("c=4 throughput: %+v", c)
	}
	for _, l := range p.Levels {
		for _, c := range l.Metrics {
			if c.Key == "goodput_per_second" {
				t.Errorf("goodput compared without an SLO")
			}
		}
	}
	// Same workload, no manifests: no warning; notes say what is missing.
	if len(res.Warnings) != 0 {
		t.Errorf("warnings: %q", res.Warnings)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"no report sets an SLO", "h100.json, l4.json: no manifest"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
	if res.Reports[0].Repeats != 3 || len(res.Reports[1].Levels) != 3 || res.Reports[1].GPUHourlyUSD != 0.8 {
		t.Errorf("reports: %+v", res.Reports)
	}

	// JSON has no NaN and carries the verdicts.
	b2, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b2, []byte(`"verdict":"larger_than_noise","winner":"l4.json"`)) {
		t.Errorf("JSON: %.400s", b2)
	}

	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{
		"A = h100.json, B = l4.json",
		"12 [7.03, 17]",
		"22 [17, 27]",
		"+83.3 %",
		"B better: larger than the noise (Welch t=6.12, df=4.0, |t| > 2.776)",
		"TTFT (any token) p99 (seconds)",
		"120 ms [70.3 ms, 170 ms]",
		"Peak VRAM (bytes)",
		"40 GiB",
		"levels not compared: only in A 64; only in B 16",
		// c=1: A better on TTFT p50/p99; B on throughput, tokens/s, VRAM,
		// tokens/J; ITL equal, cost within the noise. c=4: A on TTFT; B
		// on VRAM; the other six within the noise or equal.
		"A better: 4, B better: 5, within the noise: 9, no repeats: 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

func TestCompareSingleRunsAndMissingSides(t *testing.T) {
	// Single runs: every verdict is "no repeats". B has no GPU side and no
	// price: those metrics are left out, with notes.
	a := sweep("m", map[float64][]rep{1: {{10, 0.1, 40, 2, 0.05}}}, 2, true)
	b := sweep("m", map[float64][]rep{1: {{11, 0.1, 0, 0, 0}}}, 0, false)
	b.Runs[0].Settings.SLO.TTFTSeconds = 0.5
	res, err := Compare([]Input{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}})
	if err != nil {
		t.Fatal(err)
	}
	l := res.Pairs[0].Levels[0]
	var keys []string
	for _, c := range l.Metrics {
		keys = append(keys, c.Key)
		if c.Verdict != VerdictNoRepeats {
			t.Errorf("%s: verdict %s", c.Key, c.Verdict)
		}
	}
	want := "request_throughput_per_second output_tokens_per_second goodput_per_second ttft_seconds.p50 ttft_seconds.p99 itl_seconds.p50 itl_seconds.p99"
	if strings.Join(keys, " ") != want {
		t.Errorf("metrics %v, want %s", keys, want)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, w := range []string{"Peak VRAM not compared at some or all levels: missing in b.json (measured per level",
		"Output tokens/J not compared", "Cost per 1,000 samples not compared at some or all levels: missing in b.json (no GPU price"} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes %q lack %q", notes, w)
		}
	}
	// The SLO differs: a workload warning.
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "the workload settings differ: slo.ttft_seconds (unset) vs 0.5") {
		t.Errorf("warnings %q", res.Warnings)
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "no repeats: cannot tell noise") || !strings.Contains(buf.String(), "A better: 0, B better: 0, within the noise: 0, no repeats: 7") {
		t.Errorf("text:\n%s", buf.String())
	}
}

func TestCompareAggregateOnly(t *testing.T) {
	// A report keeping only the aggregate (its Stats) still gives CIs.
	a := sweep("m", map[float64][]rep{1: {{10, 0.1, 0, 0, 0}, {12, 0.1, 0, 0, 0}, {14, 0.1, 0, 0, 0}}}, 0, false)
	a.Runs = a.Runs[3:]
	b := sweep("m", map[float64][]rep{1: {{20, 0.1, 0, 0, 0}, {22, 0.1, 0, 0, 0}, {24, 0.1, 0, 0, 0}}}, 0, false)
	res, err := Compare([]Input{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}})
	if err != nil {
		t.Fatal(err)
	}
	c := find(t, res.Pairs[0].Levels[0], "request_throughput_per_second")
	if c.A.N != 3 || c.A.Mean != 12 || c.Verdict != VerdictDifferent || c.Winner != "b.json" {
		t.Errorf("%+v", c)
	}
}

func TestCompareConfigWarnings(t *testing.T) {
	base := func() *report.Document {
		d := sweep("llama", map[float64][]rep{1: {{10, 0.1, 0, 0, 0}}}, 1, false)
		d.Metadata.ServerModel = "llama-8b"
		d.Metadata.Manifest = &report.Manifest{SettingsHash: "aaaaaaaaaaaaaaaa11", ModelRevision: "rev1", ServerVersion: "0.11.0",
			Host: report.HostFacts{OS: "linux", Arch: "amd64", CPUs: 16, Hostname: "lg1"}}
		return d
	}
	for _, tc := range []struct {
		name  string
		edit  func(d *report.Document)
		warns []string
		note  string
	}{
		{"same", func(d *report.Document) {}, nil, ""},
		{"price and server version may differ", func(d *report.Document) {
			d.Runs[0].Settings.Cost.GPUHourlyUSD = 3
			d.Metadata.Manifest.ServerVersion = "0.12.0"
		}, nil, ""},
		{"settings hash", func(d *report.Document) { d.Metadata.Manifest.SettingsHash = "bbbbbbbbbbbbbbbb22" },
			[]string{"a.json and b.json were not run with the same configuration: settings hash aaaaaaaaaaaa vs bbbbbbbbbbbb"}, ""},
		{"dataset", func(d *report.Document) {
			d.Metadata.Dataset, d.Metadata.DatasetSHA256 = "qa.jsonl", "0123456789abcdef0123"
		},
			[]string{"the datasets differ: a.json synthetic prompts, b.json qa.jsonl (sha256 0123456789ab)"}, ""},
		{"model revision", func(d *report.Document) { d.Metadata.Manifest.ModelRevision = "rev2" },
			[]string{"the model revisions differ: a.json rev1, b.json rev2"}, ""},
		{"model names", func(d *report.Document) { d.Metadata.Model, d.Metadata.ServerModel = "qwen", "qwen-7b" },
			[]string{`the models requested differ: a.json "llama", b.json "qwen"`, `the servers reported different models: a.json "llama-8b", b.json "qwen-7b"`}, ""},
		{"workload", func(d *report.Document) { d.Runs[0].Settings.MaxTokens, d.Runs[0].Settings.Seed = 256, 7 },
			[]string{"the workload settings differ: max_tokens 128 vs 256; seed 1 vs 7"}, ""},
		{"older report without a manifest", func(d *report.Document) { d.Metadata.Manifest = nil }, nil,
			"b.json: no manifest (a report written before manifests)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			tc.edit(b)
			res, err := Compare([]Input{{Name: "a.json", Doc: base()}, {Name: "b.json", Doc: b}})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(res.Warnings, "\n") != strings.Join(tc.warns, "\n") {
				t.Errorf("warnings\n%q\nwant\n%q", res.Warnings, tc.warns)
			}
			if notes := strings.Join(res.Notes, "\n"); tc.note != "" && !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q lack %q", notes, tc.note)
			}
			if res.Reports[0].ServerVersion != "0.11.0" || res.Reports[0].Host != "lg1 linux/amd64, 16 CPUs" {
				t.Errorf("report info %+v", res.Reports[0])
			}
		})
	}
}

func TestCompareThree(t *testing.T) {
	mk := func(tput float64) *report.Document {
		return sweep("m", map[float64][]rep{1: {{tput, 0.1, 0, 0, 0}, {tput + 1, 0.1, 0, 0, 0}, {tput + 2, 0.1, 0, 0, 0}}}, 0, false)
	}
	res, err := Compare([]Input{{Name: "a", Doc: mk(10)}, {Name: "b", Doc: mk(20)}, {Name: "c", Doc: mk(10.5)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pairs) != 2 || res.Pairs[0].B != "b" || res.Pairs[1].A != "a" || res.Pairs[1].B != "c" {
		t.Fatalf("pairs %+v", res.Pairs)
	}
	if v := find(t, res.Pairs[0].Levels[0], "request_throughput_per_second"); v.Winner != "b" {
		t.Errorf("a vs b: %+v", v)
	}
	if v := find(t, res.Pairs[1].Levels[0], "request_throughput_per_second"); v.Verdict != VerdictNoise {
		t.Errorf("a vs c: %+v", v)
	}
}

func TestCompareErrors(t *testing.T) {
	ok := sweep("m", map[float64][]rep{1: {{10, 0.1, 0, 0, 0}}}, 0, false)
	other := sweep("m", map[float64][]rep{4: {{10, 0.1, 0, 0, 0}}}, 0, false)
	open := sweep("m", map[float64][]rep{1: {{10, 0.1, 0, 0, 0}}}, 0, false)
	open.Runs[0].Settings.Mode = "open"
	mixed := sweep("m", map[float64][]rep{1: {{10, 0.1, 0, 0, 0}}, 4: {{10, 0.1, 0, 0, 0}}}, 0, false)
	mixed.Runs[1].Settings.Mode = "open"
	for _, tc := range []struct {
		name   string
		inputs []Input
		want   string
	}{
		{"one report", []Input{{Name: "a.json", Doc: ok}}, "compare needs at least two reports, got 1"},
		{"no runs", []Input{{Name: "a.json", Doc: ok}, {Name: "empty.json", Doc: &report.Document{}}}, "report empty.json has no runs: nothing to compare"},
		{"no common level", []Input{{Name: "a.json", Doc: ok}, {Name: "b.json", Doc: other}}, "a.json and b.json share no level (a.json: c=1; b.json: c=4)"},
		{"modes differ", []Input{{Name: "a.json", Doc: ok}, {Name: "o.json", Doc: open}}, "a.json is closed-loop and o.json open-loop: their levels (a.json: c=1, o.json: 1/s)"},
		{"mixed modes", []Input{{Name: "a.json", Doc: ok}, {Name: "x.json", Doc: mixed}}, "report x.json mixes closed-loop and open-loop runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Compare(tc.inputs); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Compare = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		unit string
		v    float64
		want string
	}{
		{"seconds", 0.1234, "123 ms"}, {"seconds", 0.0000456, "45.6 µs"}, {"seconds", 2.5, "2.5 s"}, {"seconds", 0, "0 s"},
		{"bytes", 40 * (1 << 30), "40 GiB"}, {"bytes", 1.5 * (1 << 30), "1.5 GiB"},
		{"USD", 0.0123, "$0.0123"}, {"USD", 12.345, "$12.35"}, {"requests/s", 1234.6, "1235"}, {"USD", 0.8, "$0.80"}, {"USD", 0.04, "$0.04"}, {"tokens/J", 3.14159, "3.14"},
	} {
		if got := FormatValue(tc.unit, tc.v); got != tc.want {
			t.Errorf("FormatValue(%s, %v) = %q, want %q", tc.unit, tc.v, got, tc.want)
		}
	}
}

func TestCompareNothingCompleted(t *testing.T) {
	// At c=4 B completed nothing in its first two repeats: their latencies
	// (zeros) are no measurement and are left out; its throughput (0) is
	// one. With one repeat left, B's latency has no noise estimate.
	a := sweep("m", map[float64][]rep{4: {{40, 0.2, 0, 0, 0}, {41, 0.21, 0, 0, 0}, {42, 0.22, 0, 0, 0}}}, 0, false)
	b := sweep("m", map[float64][]rep{4: {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, {1, 3, 0, 0, 0}}}, 0, false)
	for i := range 2 {
		b.Runs[i].Summary.RequestsCompleted = 0
		b.Runs[i].Summary.TTFT, b.Runs[i].Summary.ITL = report.Dist{}, report.Dist{}
	}
	res, err := Compare([]Input{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}})
	if err != nil {
		t.Fatal(err)
	}
	l := res.Pairs[0].Levels[0]
	if c := find(t, l, "request_throughput_per_second"); c.B.N != 3 || !approx(c.B.Mean, 1.0/3) || c.Winner != "a.json" {
		t.Errorf("throughput: %+v", c)
	}
	if c := find(t, l, "ttft_seconds.p99"); c.B.N != 1 || c.B.Mean != 3 || c.Verdict != VerdictNoRepeats {
		t.Errorf("TTFT p99: %+v", c)
	}
}
