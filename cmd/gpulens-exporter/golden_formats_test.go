package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/testenv"
)

// acceptOpenMetrics is Prometheus 3's default Accept header (OpenMetrics
// first).
const acceptOpenMetrics = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

// asText parses an exposition back with expfmt and writes it in the text
// format.
func asText(t *testing.T, body []byte, f expfmt.Format) []byte {
	t.Helper()
	if f.FormatType() == expfmt.TypeOpenMetrics {
		body = omToText(t, body)
		f = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(bytes.NewReader(body), f)
	var out bytes.Buffer
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding %s: %v", f, err)
		}
		if _, err := expfmt.MetricFamilyToText(&out, &mf); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

var leLabel = regexp.MustCompile(`[{,]le="[^"]*"`)

// omToText rewrites an OpenMetrics exposition in the text format, checking
// what differs: it ends with "# EOF"; a counter's family is named without
// _total and its samples with it; numbers are written 1.0; help escapes
// quotes. expfmt's own OpenMetrics parser takes minutes on a scrape under
// the race detector (a general ABNF parser), so the text parser reads the
// result. client_golang's go_memstats_alloc_bytes and _total, one family in
// OpenMetrics, are left out (the golden files leave go_* out).
func omToText(t *testing.T, body []byte) []byte {
	t.Helper()
	text, ok := strings.CutSuffix(string(body), "# EOF\n")
	if !ok {
		t.Fatalf("OpenMetrics body does not end with # EOF")
	}
	var out strings.Builder
	var help string // the family's HELP line, until its TYPE line
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch f := strings.SplitN(line, " ", 4); {
		case strings.HasPrefix(line, "go_") || (len(f) > 2 && f[0] == "#" && strings.HasPrefix(f[2], "go_")):
		case len(f) >= 3 && f[0] == "#" && f[1] == "HELP":
			help = line
		case len(f) == 4 && f[0] == "#" && f[1] == "TYPE":
			name, typ := f[2], f[3]
			if typ == "counter" {
				name += "_total"
			}
			if help != "" {
				h := strings.SplitN(help, " ", 4)
				out.WriteString("# HELP " + name + " " + strings.ReplaceAll(h[3], `\"`, `"`) + "\n")
			}
			out.WriteString("# TYPE " + name + " " + typ + "\n")
			help = ""
		case len(line) > 0 && line[0] != '#':
			series, value := splitSample(line)
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("OpenMetrics sample %q: %v", line, err)
			}
			// A histogram's le is written 1.0 in OpenMetrics, 1 in text.
			series = leLabel.ReplaceAllStringFunc(series, func(m string) string {
				le, err := strconv.ParseFloat(m[5:len(m)-1], 64)
				if err != nil {
					t.Fatalf("OpenMetrics sample %q: %v", line, err)
				}
				return m[:1] + `le="` + strconv.FormatFloat(le, 'g', -1, 64) + `"`
			})
			out.WriteString(series + " " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
		default:
			t.Fatalf("OpenMetrics line %q", line)
		}
	}
	return []byte(out.String())
}

// sameLinesOtherOrder is what lineDiff says of a permutation.
const sameLinesOtherOrder = "(same lines in another order)\n"

// TestGoldenFormats: on the golden scenarios, with the DCGM view on, the
// OpenMetrics and protobuf scrapes, parsed back with expfmt, serve the
// golden exposition (the same families, series and pinned values as the
// text scrape), and the DCGM view serves testdata/golden/dcgm/name.txt.
func TestGoldenFormats(t *testing.T) {
	// Serial (its cases run in parallel with each other): each scrape pins
	// what the simulated fleet and the probe served at readiness; a busy
	// neighbour delays the sampler and the probe apart.
	for _, tc := range goldenCases {
		if tc.name != "dgx-h100" && tc.name != "mig-mixed" && tc.name != "mixed-fleet" && tc.name != "events" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.args = append(append([]string(nil), tc.args...), "--compat.dcgm")
			raw, addr := goldenScrapeAt(t, tc)
			golden, err := os.ReadFile(filepath.Join("testdata", "golden", tc.name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			if d := lineDiff(string(golden), string(normalise(raw))); d != "" && !*update {
				t.Errorf("with --compat.dcgm, /metrics serves other series than the golden file (- golden, + served):\n%s", d)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, f := range []struct {
				accept string
				format expfmt.Format
			}{
				{acceptOpenMetrics, expfmt.NewFormat(expfmt.TypeOpenMetrics)},
				{testenv.AcceptProtobuf, expfmt.NewFormat(expfmt.TypeProtoDelim)},
			} {
				body, err := testenv.Scrape(ctx, "http://"+addr+"/metrics", f.accept)
				if err != nil {
					t.Fatal(err)
				}
				// OpenMetrics names a counter's family without _total, so
				// the families may come in another order.
				if d := lineDiff(string(golden), string(normalise(asText(t, body, f.format)))); d != "" && d != sameLinesOtherOrder && !*update {
					t.Errorf("%s scrape, parsed back, differs from the golden file (- golden, + served):\n%s", f.format, d)
				}
			}
			// The DCGM view, in text and (parsed back) protobuf.
			text, err := testenv.Scrape(ctx, "http://"+addr+dcgmPath, testenv.AcceptText)
			if err != nil {
				t.Fatal(err)
			}
			checkDCGMValues(t, text)
			got := normaliseDCGM(text)
			path := filepath.Join("testdata", "golden", "dcgm", tc.name+".txt")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./cmd/gpulens-exporter -run GoldenFormats -update writes it)", err)
			}
			if d := lineDiff(string(want), string(got)); d != "" {
				t.Errorf("the DCGM view serves other series than %s (- golden, + served):\n%s", path, d)
			}
			pb, err := testenv.Scrape(ctx, "http://"+addr+dcgmPath, testenv.AcceptProtobuf)
			if err != nil {
				t.Fatal(err)
			}
			if d := lineDiff(string(want), string(normaliseDCGM(asText(t, pb, expfmt.NewFormat(expfmt.TypeProtoDelim))))); d != "" {
				t.Errorf("the DCGM view's protobuf scrape, parsed back, differs from %s:\n%s", path, d)
			}
		})
	}
}

// dcgmPinned are the DCGM fields whose values are facts of the scenario.
var dcgmPinned = map[string]bool{
	"DCGM_FI_DEV_FB_RESERVED":                 true,
	"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   true,
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": true,
	"DCGM_FI_DEV_ROW_REMAP_FAILURE":           true,
	"DCGM_FI_DEV_XID_ERRORS":                  true, // 0, or the events scenario's XID
}

var hostnameLabel = regexp.MustCompile(`\bHostname="[^"]*"`)

// normaliseDCGM is normalise for the DCGM view: values not pinned written
// "*", the host's name written "*".
func normaliseDCGM(body []byte) []byte {
	var out bytes.Buffer
	out.WriteString("# Generated by go test ./cmd/gpulens-exporter -run GoldenFormats -update: the DCGM-compatible view, values that move with time written \"*\".\n")
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" {
			continue
		}
		if line[0] != '#' {
			series, value := splitSample(line)
			name := series
			if i := strings.IndexByte(name, '{'); i >= 0 {
				name = name[:i]
			}
			if !dcgmPinned[name] {
				value = "*"
			}
			line = hostnameLabel.ReplaceAllString(series, `Hostname="*"`) + " " + value
		}
		out.WriteString(line + "\n")
	}
	return out.Bytes()
}

// checkDCGMValues checks the DCGM view's units: percentages within 0–100,
// PROF ratios within 0–1, nothing negative.
func checkDCGMValues(t *testing.T, body []byte) {
	t.Helper()
	view := parseView(body)
	if len(view) < 10 {
		t.Fatalf("the DCGM view serves %d fields", len(view))
	}
	for name, vals := range view {
		for _, v := range vals {
			switch {
			case v < 0:
				t.Errorf("%s = %v: negative", name, v)
			case strings.HasSuffix(name, "_UTIL") && v > 100:
				t.Errorf("%s = %v: above 100 %%", name, v)
			case strings.HasSuffix(name, "_ACTIVE") && v > 1:
				t.Errorf("%s = %v: a ratio above 1", name, v)
			}
		}
	}
}

// TestDCGMFieldsDocumented: every field of the DCGM view is in the DCGM
// table of docs/metrics.md and in the migration guide's mapping, and every
// family of the DCGM golden files is one of them.
func TestDCGMFieldsDocumented(t *testing.T) {
	t.Parallel()
	metrics, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "dcgm-migration.md"))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	for _, name := range collector.DCGMFields() {
		fields[name] = true
		if !bytes.Contains(metrics, []byte("| `"+name+"` |")) {
			t.Errorf("docs/metrics.md does not document %s", name)
		}
		if !bytes.Contains(guide, []byte("`"+name)) {
			t.Errorf("docs/dcgm-migration.md does not map %s", name)
		}
	}
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "dcgm", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("DCGM golden files: %v %v", files, err)
	}
	served := map[string]bool{}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
				served[f[2]] = true
				if !fields[f[2]] {
					t.Errorf("a DCGM golden file serves %s, not a field of collector.DCGMFields", f[2])
				}
			}
		}
	}
	for name := range fields {
		if !served[name] {
			t.Errorf("%s: in no DCGM golden file", name)
		}
	}
}
