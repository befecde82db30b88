package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/gpulens/gpulens/internal/cudaver"
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// sampleReport is a judged report with one healthy and one time-sliced
// device, and text that needs escaping.
func sampleReport(t *testing.T) *Report {
	t.Helper()
	f := healthyFixture()
	f.dev.Name = `<b>NVIDIA</b> "H100" & co`
	_, rep := f.judge()
	g := healthyFixture()
	g.dev.Label = "CUDA 1"
	g.eachResult(func(_ int, r *gpuprobe.Result) {
		r.Stolen.Ratio, r.Stolen.MaxRatio, r.Stolen.GapMedian = 0.5, 0.55, 2*time.Millisecond
	})
	d1, _ := g.judge()
	rep.Devices = append(rep.Devices, d1)
	rep.SchemaVersion, rep.Tool, rep.Version = SchemaVersion, "gpulens-verify", "v0.test"
	rep.Started, rep.Finished = t0, t0.Add(20*time.Second)
	rep.Simulated = &Simulation{Scenario: "rented-timesliced", Seed: 7}
	rep.Settings.Interval = 2 * time.Second
	rep.Settings.Probe = ProbeSettings{GPUTimeBudget: 2 * time.Second, StolenWindow: time.Second, MaxMemoryBytes: 1 << 30}
	rep.Notes = []string{"--loadgen.target is not implemented <yet>"}
	rep.summarise()
	return rep
}

func TestJSONRoundTrip(t *testing.T) {
	rep := sampleReport(t)
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"schema_version": 1`, `"stolen_ratio"`, `"bf16_tensor_flops"`, `"under_load"`, `"exit_code": 1`, `"verdict": "fail"`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
	got, err := ReadJSON(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rep) {
		a, _ := jsonString(got)
		b, _ := jsonString(rep)
		t.Errorf("round trip differs:\n got %.2000s\nwant %.2000s", a, b)
	}

	bad := strings.Replace(buf.String(), `"schema_version": 1`, `"schema_version": 99`, 1)
	if _, err := ReadJSON(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "schema version 99") {
		t.Errorf("schema 99: err = %v", err)
	}
}

func jsonString(r *Report) (string, error) {
	var b bytes.Buffer
	err := WriteJSON(&b, r)
	return b.String(), err
}

// voidElements have no end tag.
var voidElements = map[string]bool{"meta": true, "br": true, "hr": true, "img": true, "input": true, "link": true, "col": true, "wbr": true}

func TestHTMLIsWellFormedAndComplete(t *testing.T) {
	rep := sampleReport(t)
	var buf bytes.Buffer
	if err := WriteHTML(&buf, rep); err != nil {
		t.Fatal(err)
	}
	page := buf.String()

	// Every element is closed in order.
	z := html.NewTokenizer(strings.NewReader(page))
	var stack []string
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			if !errors.Is(z.Err(), io.EOF) {
				t.Fatalf("tokenizer: %v", z.Err())
			}
			break
		}
		name, _ := z.TagName()
		switch tt {
		case html.StartTagToken:
			if !voidElements[string(name)] {
				stack = append(stack, string(name))
			}
		case html.EndTagToken:
			if len(stack) == 0 || stack[len(stack)-1] != string(name) {
				t.Fatalf("</%s> closes %v", name, stack)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements %v", stack)
	}

	// Every check of every device and of the host is a row with its verdict.
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{} // section/check id → class
	var walk func(n *html.Node, section string)
	walk = func(n *html.Node, section string) {
		if n.Type == html.ElementNode {
			for _, a := range n.Attr {
				if a.Key == "data-device" {
					section = a.Val
				}
				if a.Key == "data-check" || a.Key == "data-answer" {
					key := a.Val
					if a.Key == "data-answer" {
						key = "answer:" + a.Val
					}
					class := ""
					for _, b := range n.Attr {
						if b.Key == "class" {
							class = b.Val
						}
					}
					rows[section+"/"+key] = append(rows[section+"/"+key], class)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, section)
		}
	}
	walk(doc, "host")
	for _, d := range rep.Devices {
		for _, c := range d.Checks {
			if got := rows[d.Label+"/"+c.ID]; len(got) != 1 || got[0] != string(c.Status) {
				t.Errorf("%s/%s rows %v, want one of class %s", d.Label, c.ID, got, c.Status)
			}
		}
		for _, a := range d.Answers {
			if got := rows[d.Label+"/answer:"+a.ID]; len(got) != 1 || got[0] != string(a.Status) {
				t.Errorf("%s/%s answer rows %v", d.Label, a.ID, got)
			}
		}
	}
	for _, c := range rep.Checks {
		if got := rows["host/"+c.ID]; len(got) != 1 || got[0] != string(c.Status) {
			t.Errorf("host/%s rows %v", c.ID, got)
		}
	}
	if got := rows["CUDA 1/"+CheckStolen]; len(got) != 1 || got[0] != "fail" {
		t.Errorf("the time-sliced device's stolen-time row is %v, want fail", got)
	}

	// Escaped, self-contained, simulated run flagged.
	for _, want := range []string{
		"&lt;b&gt;NVIDIA&lt;/b&gt; &#34;H100&#34; &amp; co",
		"Simulated GPUs: scenario rented-timesliced, seed 7",
		"--loadgen.target is not implemented &lt;yet&gt;",
		`<div class="verdict fail" id="verdict">FAIL:`,
		"<title>GPU host acceptance report (simulated)</title>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, banned := range []string{"<b>NVIDIA", "<script", "http://", "https://", "<link", "src=", "@import"} {
		if strings.Contains(page, banned) {
			t.Errorf("page contains %q", banned)
		}
	}
}

func TestTextReport(t *testing.T) {
	rep := sampleReport(t)
	var buf bytes.Buffer
	if err := WriteText(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"gpulens-verify v0.test: host acceptance report — SIMULATED GPUs (scenario rented-timesliced, seed 7)",
		"Host: driver 550.54.15 · NVML lists 1 GPU(s) · CUDA 12.4 · CUDA sees 1 device(s) · 3 run(s) per device, 2 s apart",
		"PASS — CUDA 0 · <b>NVIDIA</b>",
		"FAIL — CUDA 1 · NVIDIA H100 80GB HBM3 · judged as H100 SXM",
		"  FAIL  Shared, partitioned or dedicated?            shared: time-sliced with a neighbour you cannot see, which took 50 % of the GPU time in slices of about 2 ms",
		"  PASS  Are CUDA and the driver what you need?",
		"    BF16 tensor (mma.sync)",
		"    FAIL  Stolen time (invisible neighbours): the GPU ran someone else's work for 50 %",
		"note: --loadgen.target is not implemented <yet>",
		"Verdict: FAIL — ",
		"(exit 1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q\n%s", want, out)
		}
	}
	for _, d := range rep.Devices {
		for _, a := range d.Answers {
			if !strings.Contains(out, a.Question) {
				t.Errorf("text lacks question %q", a.Question)
			}
		}
		for _, c := range d.Checks {
			if !strings.Contains(out, c.Title+": "+c.Reason) {
				t.Errorf("text lacks check %s", c.ID)
			}
		}
	}
}

func TestWriteFileIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	rep := sampleReport(t)
	if err := WriteFile(path, rep, WriteJSON); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, err := ReadJSON(f); err != nil || got.Summary != rep.Summary {
		t.Errorf("read back %+v, %v", got, err)
	}
	failing := func(io.Writer, *Report) error { return errors.New("boom") }
	if err := WriteFile(filepath.Join(dir, "x.html"), rep, failing); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "r.json"), rep, WriteJSON); err == nil {
		t.Error("writing into a missing folder succeeded")
	}
}

func TestStat(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want *Stat
	}{
		{nil, nil},
		{[]float64{5}, &Stat{N: 1, Median: 5, Min: 5, Max: 5}},
		{[]float64{3, 1, 2}, &Stat{N: 3, Median: 2, Min: 1, Max: 3, CV: 0.5}},
		{[]float64{4, 1, 3, 2}, &Stat{N: 4, Median: 2.5, Min: 1, Max: 4, CV: math.Sqrt(5.0/3) / 2.5}},
		{[]float64{0, 0}, &Stat{N: 2}},
	} {
		got := NewStat(tc.in)
		if (got == nil) != (tc.want == nil) || (got != nil && (got.N != tc.want.N || got.Median != tc.want.Median ||
			got.Min != tc.want.Min || got.Max != tc.want.Max || math.Abs(got.CV-tc.want.CV) > 1e-12)) {
			t.Errorf("NewStat(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string][2]int{"gen5x16": {5, 16}, "Gen4 x8": {4, 8}, "GEN5": {5, 0}, "gen3 x 4": {3, 4}} {
		g, w, err := ParsePCIe(in)
		if err != nil || g != want[0] || w != want[1] {
			t.Errorf("ParsePCIe(%q) = %d, %d, %v", in, g, w, err)
		}
	}
	for _, in := range []string{"gen7x16", "gen5x3", "x16", "5x16", "pcie5"} {
		if _, _, err := ParsePCIe(in); err == nil {
			t.Errorf("ParsePCIe(%q) succeeded", in)
		}
	}
	for in, want := range map[string]int{"12.4": 12040, "12": 12000, "11.8": 11080, " 13.0 ": 13000} {
		if got, err := cudaver.Parse(in); err != nil || got != want {
			t.Errorf("cudaver.Parse(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "12.4.1", "twelve", "0", "12.x"} {
		if _, err := cudaver.Parse(in); err == nil {
			t.Errorf("cudaver.Parse(%q) succeeded", in)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{{"550.54.15", "550", 1}, {"550", "550.0.0", 0}, {"535.104.05", "550", -1}, {"580.159.04", "580.159.4", 0}, {"9.1", "10", -1}} {
		if got, err := CompareVersions(tc.a, tc.b); err != nil || got != tc.want {
			t.Errorf("CompareVersions(%s, %s) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
	if _, err := CompareVersions("550.x", "550"); err == nil {
		t.Error("CompareVersions accepted 550.x")
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{fmtGiB(79.6 * gib), "79.6 GiB"}, {fmtGiB(20 * gib), "20 GiB"}, {fmtGiB(140.4 * gib), "140 GiB"},
		{fmtRate(52.1e9), "52.1 GB/s"}, {fmtRate(2.953e12), "2.95 TB/s"}, {fmtRate(800e6), "800 MB/s"},
		{fmtFLOPS(543.6e12), "544 TFLOP/s"}, {fmtFLOPS(53.61e12), "53.6 TFLOP/s"}, {fmtFLOPS(2.25e15), "2.25 PFLOP/s"},
		{fmtDuration(8200 * time.Nanosecond), "8.2 µs"}, {fmtDuration(2 * time.Millisecond), "2 ms"}, {fmtDuration(300), "300 ns"},
		{fmtPct(0.4812), "48 %"}, {fmtPct(0.0012), "0.12 %"}, {fmtRate(724.7e9), "725 GB/s"}, {cudaver.Format(12040), "12.4"}, {cudaver.Format(13000), "13.0"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// A check's data fields are optional in the JSON: absent where the check
// has none, and a report written before they existed still reads (its
// checks as measured, without figures).
func TestCheckJSONFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Check
		json string
	}{
		{"not measured", notMeasured(CheckStolen, "Stolen time", "no watch kernel"),
			`{"id":"stolen_time","title":"Stolen time","status":"warn","reason":"not measured: no watch kernel","not_measured":true}`},
		{"a state, no figure", check(CheckECCMode, "ECC", StatusPass, "on"),
			`{"id":"ecc_mode","title":"ECC","status":"pass","reason":"on"}`},
		{"a figure without reference", check(CheckLaunch, "Launch", StatusPass, "8 µs").measuring(8e-6, UnitSeconds),
			`{"id":"launch_latency","title":"Launch","status":"pass","reason":"8 µs","value":0.000008,"unit":"seconds"}`},
		{"a figure judged against a reference", check(CheckBF16, "BF16", StatusWarn, "low").measuring(7e14, UnitFLOPS).against(1e15, 0.7),
			`{"id":"bf16_tensor_flops","title":"BF16","status":"warn","reason":"low","value":700000000000000,"unit":"flop_per_second","expected":1000000000000000,"share":0.7}`},
		{"a zero value is written", check(CheckStolen, "Stolen time", StatusPass, "none").measuring(0, UnitRatio),
			`{"id":"stolen_time","title":"Stolen time","status":"pass","reason":"none","value":0,"unit":"ratio"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.json {
				t.Errorf("JSON\n got %s\nwant %s", b, tc.json)
			}
			var back Check
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, tc.c) {
				t.Errorf("read back %+v, want %+v", back, tc.c)
			}
		})
	}
	var old Check
	if err := json.Unmarshal([]byte(`{"id":"fp32_flops","title":"FP32 throughput","status":"pass","reason":"60 TFLOP/s: 110 % of the 54 TFLOP/s a healthy H100 SXM reaches"}`), &old); err != nil {
		t.Fatal(err)
	}
	if !old.Measured() || old.Value != nil || old.Expected != nil || old.Share != nil || old.Unit != "" {
		t.Errorf("an older check reads as %+v, want measured with no figures", old)
	}
}
