package collector

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func newTestExposition(t *testing.T, clock *fakeClock, dev nvml.Device) (*Sampler, *Exposition, *prometheus.Registry) {
	t.Helper()
	s, full := newTestSampler(t, newMockLib(dev), clock.Now, false)
	live := prometheus.NewRegistry()
	live.MustRegister(s.Live())
	return s, NewExposition(s, live, ExpositionOptions{Now: clock.Now}), full
}

func get(t *testing.T, h http.Handler, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	return rec
}

// parseText parses a text exposition into the same map as series().
func parseText(t *testing.T, body []byte) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing exposition: %v\n%s", err, body)
	}
	return series(t, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		out := make([]*dto.MetricFamily, 0, len(mfs))
		for _, mf := range mfs {
			out = append(out, mf)
		}
		return out, nil
	}))
}

func TestExpositionMatchesLiveGather(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, exp, full := newTestExposition(t, clock, newMockDevice(0))
	cycleAll(s)
	clock.Advance(time.Second)
	cycleAll(s)

	plain := get(t, exp, nil)
	if ct := plain.Header().Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8; escaping=underscores" && ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	got := parseText(t, plain.Body.Bytes())
	want := series(t, full)
	if len(got) != len(want) {
		t.Errorf("exposition has %d series, the live gather %d", len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: exposition %v (present %v), live %v", k, g, ok, v)
		}
	}

	zipped := get(t, exp, map[string]string{"Accept-Encoding": "gzip"})
	if ce := zipped.Header().Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", ce)
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(unzipped, plain.Body.Bytes()) {
		t.Errorf("gzip body differs from the plain body")
	}

	proto := get(t, exp, map[string]string{"Accept": "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7"})
	if ct := proto.Header().Get("Content-Type"); !bytes.Contains([]byte(ct), []byte("application/vnd.google.protobuf")) {
		t.Errorf("protobuf request answered with %q", ct)
	}
}

// TestExpositionRendersOncePerScrapedSnapshot: a scrape renders only when
// the sampler published a snapshot since the last render (or the render is
// older than one interval); snapshots nobody scrapes are never rendered.
func TestExpositionRendersOncePerScrapedSnapshot(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	dev := newMockDevice(0)
	var temp atomic.Uint32
	temp.Store(40)
	dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return temp.Load(), nvml.SUCCESS }
	s, exp, _ := newTestExposition(t, clock, dev)
	cycleAll(s)
	key := "gpulens_gpu_temperature_celsius{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000}"
	scrapeTemp := func() float64 { return parseText(t, get(t, exp, nil).Body.Bytes())[key] }

	if exp.renders.Load() != 0 {
		t.Fatalf("%d renders before the first scrape, want 0", exp.renders.Load())
	}
	if v := scrapeTemp(); v != 40 {
		t.Fatalf("first scrape: temperature %v, want 40", v)
	}
	if n := exp.renders.Load(); n != 1 {
		t.Fatalf("%d renders after the first scrape, want 1", n)
	}
	// Same snapshot: the rendered bytes are served again, gzipped or not.
	scrapeTemp()
	get(t, exp, map[string]string{"Accept-Encoding": "gzip"})
	if n := exp.renders.Load(); n != 1 {
		t.Fatalf("%d renders after three scrapes of one snapshot, want 1", n)
	}
	// Five cycles nobody scrapes: nothing is rendered.
	for range 5 {
		temp.Add(1)
		clock.Advance(time.Second / 10)
		cycleAll(s)
	}
	if n := exp.renders.Load(); n != 1 {
		t.Fatalf("%d renders after unscraped snapshots, want still 1", n)
	}
	// The next scrape renders the latest snapshot, once.
	if v := scrapeTemp(); v != 45 {
		t.Fatalf("scrape after five cycles: temperature %v, want 45", v)
	}
	scrapeTemp()
	if n := exp.renders.Load(); n != 2 {
		t.Fatalf("%d renders, want 2", n)
	}
	// No new snapshot but the render is one interval old: the exporter's own
	// metrics are rendered again.
	clock.Advance(time.Second)
	scrapeTemp()
	if n := exp.renders.Load(); n != 3 {
		t.Fatalf("%d renders after an interval without a snapshot, want 3", n)
	}
}

// blockingCollector blocks every Collect until release is closed and counts
// the collections.
type blockingCollector struct {
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

var blockingDesc = prometheus.NewDesc("test_blocking", "Blocks the gather.", nil, nil)

func (c *blockingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- blockingDesc }

func (c *blockingCollector) Collect(ch chan<- prometheus.Metric) {
	if c.calls.Add(1) == 1 {
		close(c.entered)
	}
	<-c.release
	ch <- prometheus.MustNewConstMetric(blockingDesc, prometheus.GaugeValue, 1)
}

// TestExpositionConcurrentScrapesShareOneRender: scrapes arriving while a
// render runs wait for it and serve it.
func TestExpositionConcurrentScrapesShareOneRender(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, _ := newTestSampler(t, newMockLib(newMockDevice(0)), clock.Now, false)
	cycleAll(s)
	bc := &blockingCollector{entered: make(chan struct{}), release: make(chan struct{})}
	live := prometheus.NewRegistry()
	live.MustRegister(s.Live(), bc)
	exp := NewExposition(s, live, ExpositionOptions{Now: clock.Now})

	const n = 8
	bodies := make(chan []byte, n)
	scrape := func() {
		rec := httptest.NewRecorder()
		exp.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		bodies <- rec.Body.Bytes()
	}
	go scrape()
	<-bc.entered // the first scrape is rendering
	for range n - 1 {
		go scrape()
	}
	close(bc.release)
	var first []byte
	for i := range n {
		b := <-bodies
		if !bytes.Contains(b, []byte("test_blocking 1")) || !bytes.Contains(b, []byte("gpulens_gpu_up{")) {
			t.Fatalf("scrape %d incomplete:\n%s", i, b)
		}
		if first == nil {
			first = b
		} else if !bytes.Equal(b, first) {
			t.Errorf("scrape %d served other bytes than the first", i)
		}
	}
	if c := bc.calls.Load(); c != 1 {
		t.Errorf("%d concurrent scrapes gathered %d times, want 1", n, c)
	}
	if r := exp.renders.Load(); r != 1 {
		t.Errorf("%d concurrent scrapes rendered %d times, want 1", n, r)
	}
}

// TestExpositionMethods: GET and HEAD are served, anything else is 405
// with an Allow header; a request carrying a body is answered without
// reading it, and its connection closed.
func TestExpositionMethods(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, exp, _ := newTestExposition(t, clock, newMockDevice(0))
	cycleAll(s)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, http.MethodTrace, "PROPFIND"} {
		rec := httptest.NewRecorder()
		exp.ServeHTTP(rec, httptest.NewRequest(m, "/metrics", nil))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q; want 405 and \"GET, HEAD\"", m, rec.Code, rec.Header().Get("Allow"))
		}
		if bytes.Contains(rec.Body.Bytes(), []byte("gpulens_")) {
			t.Errorf("%s served metrics", m)
		}
	}
	if exp.renders.Load() != 0 {
		t.Errorf("refused methods rendered %d times", exp.renders.Load())
	}
	getRec := get(t, exp, nil)
	head := httptest.NewRecorder()
	exp.ServeHTTP(head, httptest.NewRequest(http.MethodHead, "/metrics", nil))
	if head.Code != http.StatusOK || head.Body.Len() != 0 {
		t.Errorf("HEAD: %d with %d body bytes, want 200 and none", head.Code, head.Body.Len())
	}
	if cl, want := head.Header().Get("Content-Length"), strconv.Itoa(getRec.Body.Len()); cl != want {
		t.Errorf("HEAD Content-Length %q, want the GET body's %s", cl, want)
	}
	withBody := httptest.NewRequest(http.MethodGet, "/metrics", strings.NewReader("unexpected"))
	rec := httptest.NewRecorder()
	exp.ServeHTTP(rec, withBody)
	if rec.Code != http.StatusOK || rec.Header().Get("Connection") != "close" {
		t.Errorf("GET with a body: %d, Connection %q; want 200 and close", rec.Code, rec.Header().Get("Connection"))
	}
	if n, _ := withBody.Body.Read(make([]byte, 64)); n != len("unexpected") {
		t.Errorf("the request body was read by the handler")
	}
	if get(t, exp, nil).Header().Get("Connection") != "" {
		t.Errorf("a plain GET closes its connection")
	}
}

func TestAcceptsGzip(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]bool{
		"":                        false,
		"gzip":                    true,
		"gzip, deflate, br":       true,
		"deflate, GZIP;q=0.5":     true,
		"gzip;q=0":                false,
		"gzip; q=0.0, identity":   false,
		"identity":                false,
		"x-gzip-not, br":          false,
		"br;q=1.0, gzip;q=0.001 ": true,
	} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}

// TestSnapshotTextMatchesExpfmt: the snapshot written directly is byte for
// byte what a registry gather encoded by expfmt gives, for a mock GPU with a
// name that needs escaping, simulated fleets with processes and MIG, and 8
// GPUs × 7 MIG instances × 64 processes.
func TestSnapshotTextMatchesExpfmt(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, exp *Exposition) {
		t.Helper()
		exp.renderMu.Lock()
		defer exp.renderMu.Unlock()
		for range 2 { // the second render reuses the learnt families and buffers
			r, err := exp.render()
			if err != nil {
				t.Fatal(err)
			}
			for f := range numFormats {
				var want bytes.Buffer
				if _, err := exp.renderGathered(&want, f); err != nil {
					t.Fatal(err)
				}
				b, err := exp.encode(r, f)
				if err != nil {
					t.Fatal(err)
				}
				plain, err := b.uncompressed()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(plain, want.Bytes()) {
					t.Errorf("%s format: the pre-rendered body differs from expfmt's", f)
				}
			}
			plain, err := r.text()
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if _, err := exp.renderGathered(&want, formatText); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(plain, want.Bytes()) {
				got, wantLines := strings.Split(string(plain), "\n"), strings.Split(want.String(), "\n")
				for i := range min(len(got), len(wantLines)) {
					if got[i] != wantLines[i] {
						t.Fatalf("line %d differs:\n got %s\nwant %s", i+1, got[i], wantLines[i])
					}
				}
				t.Fatalf("%d lines, want %d", len(got), len(wantLines))
			}
		}
	}
	t.Run("mock", func(t *testing.T) {
		clock := newFakeClock()
		dev := newMockDevice(0)
		dev.GetNameFunc = func() (string, nvml.Return) { return "NVIDIA \"H100\" 80GB \\ HBM3\nnext line", nvml.SUCCESS }
		s, exp, _ := newTestExposition(t, clock, dev)
		cycleAll(s)
		clock.Advance(time.Second)
		cycleAll(s)
		check(t, exp)
		if plain, _ := exp.current.Load().text(); !bytes.Contains(plain, []byte(`name="NVIDIA \"H100\" 80GB \\ HBM3\nnext line"`)) {
			t.Errorf("GPU name not escaped")
		}
	})
	for _, sc := range []string{"noisy-neighbour", "mig-mixed", "dgx-h100"} {
		t.Run(sc, func(t *testing.T) {
			env := newSimEnv(t, sc, nil)
			for d := time.Second; d <= 90*time.Second; d += 30 * time.Second {
				env.at(d)
			}
			live := prometheus.NewRegistry()
			live.MustRegister(env.s.Live())
			check(t, NewExposition(env.s, live, ExpositionOptions{Now: env.clock.Now}))
		})
	}
	t.Run("8gpu_7mig_64proc", func(t *testing.T) {
		_, exp, _ := newBenchFleet(t, 8, 64, true)
		check(t, exp)
	})
	// The exporter's own collectors in a Registry are collected with the
	// snapshot and written the same way: counters, gauges, a histogram, a
	// summary, an untyped metric and constant labels.
	t.Run("registry", func(t *testing.T) {
		env := newSimEnv(t, "noisy-neighbour", nil)
		for d := time.Second; d <= 30*time.Second; d += 10 * time.Second {
			env.at(d)
		}
		reg := NewRegistry()
		hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_seconds", Help: "A histogram.", Buckets: []float64{0.1, 1}})
		hist.Observe(0.5)
		sum := prometheus.NewSummary(prometheus.SummaryOpts{Name: "test_summary", Help: "A summary.", Objectives: map[float64]float64{0.5: 0.05}})
		sum.Observe(2)
		untyped := prometheus.NewUntypedFunc(prometheus.UntypedOpts{Name: "test_untyped", Help: "Untyped.", ConstLabels: prometheus.Labels{"k": "v\"q\""}}, func() float64 { return 1.5 })
		reg.MustRegister(env.s.Live(), hist, sum, untyped, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "test_total", Help: "Counter\nwith a newline."}, func() float64 { return 3 }))
		exp := NewExposition(env.s, reg, ExpositionOptions{Now: env.clock.Now})
		check(t, exp)
		// Every family was learnt on the first render: a later render of a
		// new snapshot learns nothing.
		learnt := len(exp.text.metas)
		env.at(40 * time.Second)
		check(t, exp)
		if n := len(exp.text.metas); n != learnt {
			t.Errorf("%d families learnt after a second render, %d after the first", n, learnt)
		}
		if reg.Unregister(untyped) {
			exp.renderMu.Lock()
			r, err := exp.render()
			exp.renderMu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if text, _ := r.text(); bytes.Contains(text, []byte("test_untyped")) {
				t.Errorf("an unregistered collector is still rendered")
			}
		} else {
			t.Errorf("Unregister failed")
		}
	})
	// What gpulens-exporter registers: learnt once too.
	t.Run("exporter's own", func(t *testing.T) {
		e := newSimExporter(t, "dgx-h100")
		e.scrape(t)
		learnt := len(e.exp.text.metas)
		for range 3 {
			e.second()
			e.scrape(t)
		}
		if n := len(e.exp.text.metas); n != learnt || e.exp.renders.Load() != 4 {
			t.Errorf("%d families learnt after 4 renders (%d), %d after the first", n, e.exp.renders.Load(), learnt)
		}
		plain, _ := e.exp.current.Load().text()
		for _, want := range []string{"go_goroutines ", "go_gc_duration_seconds{quantile=\"0\"}", "process_cpu_seconds_total ", "gpulens_exporter_build_info{", "gpulens_gpu_up{gpu=\"7\""} {
			if !bytes.Contains(plain, []byte(want)) {
				t.Errorf("render lacks %s", want)
			}
		}
	})
}

// TestExpositionFamilyInBothSources: a registry family that the snapshot
// also has is merged as a registry gather merges it.
func TestExpositionFamilyInBothSources(t *testing.T) {
	t.Parallel()
	for name, live := range map[string]interface {
		prometheus.Gatherer
		MustRegister(...prometheus.Collector)
	}{"prometheus.Registry": prometheus.NewRegistry(), "Registry": NewRegistry()} {
		t.Run(name, func(t *testing.T) {
			clock := newFakeClock()
			s, _ := newTestSampler(t, newMockLib(newMockDevice(0)), clock.Now, false)
			cycleAll(s)
			extra := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulens_gpu_up", Help: gpuUpHelpForTest(t, s)}, []string{"gpu", "uuid"})
			extra.WithLabelValues("9", "GPU-extra").Set(1)
			live.MustRegister(s.Live(), extra)
			exp := NewExposition(s, live, ExpositionOptions{Now: clock.Now})
			got := parseText(t, get(t, exp, nil).Body.Bytes())
			for _, k := range []string{"gpulens_gpu_up{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000}", "gpulens_gpu_up{gpu=9,uuid=GPU-extra}"} {
				if got[k] != 1 {
					t.Errorf("%s = %v, want 1", k, got[k])
				}
			}
		})
	}
}

// gpuUpHelpForTest is gpulens_gpu_up's help, which a merged family must share.
func gpuUpHelpForTest(t *testing.T, s *Sampler) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(snapshotCollector{s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpulens_gpu_up" {
			return mf.GetHelp()
		}
	}
	t.Fatal("no gpulens_gpu_up")
	return ""
}

// TestExpositionEveryFormatOncePerSnapshot: concurrent scrapes in the text,
// OpenMetrics and protobuf formats of one snapshot group it once and
// encode each format once; every scrape gets its format's body, and every
// body holds the same series. A new snapshot is grouped and encoded again,
// in the formats scraped only.
func TestExpositionEveryFormatOncePerSnapshot(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, exp, _ := newTestExposition(t, clock, newMockDevice(0))
	cycleAll(s)
	accept := [numFormats]string{
		formatText:        "text/plain;version=0.0.4",
		formatOpenMetrics: "application/openmetrics-text;version=1.0.0",
		formatProtobuf:    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited",
	}
	const perFormat = 8
	bodies := make([][]byte, numFormats*perFormat)
	types := make([]string, numFormats*perFormat)
	var wg sync.WaitGroup
	for i := range bodies {
		f := format(i % int(numFormats))
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Accept", accept[f])
			rec := httptest.NewRecorder()
			exp.ServeHTTP(rec, req)
			bodies[i], types[i] = rec.Body.Bytes(), rec.Header().Get("Content-Type")
		}()
	}
	wg.Wait()
	if n := exp.renders.Load(); n != 1 {
		t.Errorf("%d groupings of one snapshot, want 1", n)
	}
	for f := range numFormats {
		if n := exp.encodes[f].Load(); n != 1 {
			t.Errorf("%s encoded %d times, want 1", f, n)
		}
	}
	lines := func(body []byte) int { // samples of a text or OpenMetrics body
		n := 0
		for _, l := range bytes.Split(body, []byte("\n")) {
			if len(l) > 0 && l[0] != '#' {
				n++
			}
		}
		return n
	}
	metrics := func(body []byte, f format) int { // decoded metrics
		dec := expfmt.NewDecoder(bytes.NewReader(body), expfmt.Format(contentType[f]))
		n := 0
		for {
			var mf dto.MetricFamily
			if err := dec.Decode(&mf); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("%s: %v", f, err)
				}
				return n
			}
			n += len(mf.GetMetric())
		}
	}
	text := bodies[formatText]
	if !bytes.HasSuffix(bodies[formatOpenMetrics], []byte("# EOF\n")) {
		t.Errorf("OpenMetrics body without # EOF")
	}
	if a, b := lines(bodies[formatOpenMetrics]), lines(text); a != b || a < 10 {
		t.Errorf("OpenMetrics body: %d samples, the text body %d", a, b)
	}
	if a, b := metrics(bodies[formatProtobuf], formatProtobuf), metrics(text, formatText); a != b || a < 10 {
		t.Errorf("protobuf body: %d metrics, the text body %d", a, b)
	}
	for i := range bodies {
		f := format(i % int(numFormats))
		if types[i] != contentType[f] {
			t.Errorf("%s scrape answered with %q", f, types[i])
		}
		if !bytes.Equal(bodies[i], bodies[int(f)]) {
			t.Errorf("%s scrapes of one snapshot got different bodies", f)
		}
	}
	// A new snapshot, scraped in protobuf only.
	clock.Advance(time.Second)
	cycleAll(s)
	get(t, exp, map[string]string{"Accept": accept[formatProtobuf]})
	if r, text, pb := exp.renders.Load(), exp.encodes[formatText].Load(), exp.encodes[formatProtobuf].Load(); r != 2 || text != 1 || pb != 2 {
		t.Errorf("after a protobuf scrape of a new snapshot: %d groupings, text encoded %d times, protobuf %d; want 2, 1, 2", r, text, pb)
	}
}

// TestWriteFloatMatchesExpfmt: the pre-rendered numbers are expfmt's, in
// text and OpenMetrics, for the values a gauge can hold.
func TestWriteFloatMatchesExpfmt(t *testing.T) {
	t.Parallel()
	name, help, typ := "x", "x", dto.MetricType_GAUGE
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 42, 1e21, 1.5e-7, 123456789, math.NaN(), math.Inf(1), math.Inf(-1)} {
		mf := &dto.MetricFamily{Name: &name, Help: &help, Type: &typ, Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: &v}}}}
		for _, om := range []bool{false, true} {
			var want bytes.Buffer
			var err error
			if om {
				_, err = expfmt.MetricFamilyToOpenMetrics(&want, mf)
			} else {
				_, err = expfmt.MetricFamilyToText(&want, mf)
			}
			if err != nil {
				t.Fatal(err)
			}
			var sample string
			for _, l := range strings.Split(want.String(), "\n") {
				if strings.HasPrefix(l, "x ") {
					sample = strings.TrimPrefix(l, "x ")
				}
			}
			var got bytes.Buffer
			var st snapshotText
			st.writeFloat(&got, v, om)
			if got.String() != sample {
				t.Errorf("%v (OpenMetrics %v): wrote %q, expfmt %q", v, om, got.String(), sample)
			}
		}
	}
}
