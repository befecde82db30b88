package collector

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
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

func TestExpositionRendersAgainWhenStale(t *testing.T) {
	clock := newFakeClock()
	dev := newMockDevice(0)
	temp := uint32(40)
	dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return temp, nvml.SUCCESS }
	s, exp, _ := newTestExposition(t, clock, dev)
	cycleAll(s)
	key := "gpulens_gpu_temperature_celsius{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000}"
	if v := parseText(t, get(t, exp, nil).Body.Bytes())[key]; v != 40 {
		t.Fatalf("first scrape: temperature %v, want 40", v)
	}
	temp = 41
	cycleAll(s)
	// Within one interval the pre-rendered bytes are served as they are.
	clock.Advance(500 * time.Millisecond)
	if v := parseText(t, get(t, exp, nil).Body.Bytes())[key]; v != 40 {
		t.Fatalf("scrape within the interval: temperature %v, want the rendered 40", v)
	}
	// The background loop would have rendered by now; without it, a scrape
	// finding a render older than two intervals renders itself.
	clock.Advance(2 * time.Second)
	if v := parseText(t, get(t, exp, nil).Body.Bytes())[key]; v != 41 {
		t.Fatalf("scrape after the render went stale: temperature %v, want 41", v)
	}
}

func TestAcceptsGzip(t *testing.T) {
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
