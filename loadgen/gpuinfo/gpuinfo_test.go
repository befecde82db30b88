package gpuinfo

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// exporter serves the fixture scrapes in turn, then HTTP 500.
func exporter(t *testing.T, files ...string) *httptest.Server {
	t.Helper()
	var bodies [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1) - 1)
		if i >= len(bodies) {
			http.Error(w, "gone", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(bodies[i])
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestPollFixtureScrapes(t *testing.T) {
	srv := exporter(t, "testdata/scrape1.prom", "testdata/scrape2.prom")
	p := NewPoller(srv.URL+"/metrics", 0, slog.New(slog.DiscardHandler))
	for i := 0; i < 2; i++ {
		if err := p.Poll(context.Background()); err != nil {
			t.Fatalf("poll %d: %v", i, err)
		}
	}
	got := p.Info()
	want := []report.GPU{
		{GPU: "0", UUID: "GPU-11111111-2222-3333-4444-555555555555", Name: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:18:00.0",
			Serial: "1650223000001", DriverVersion: "570.124.06", CUDADriverVersion: "12.8", VBIOSVersion: "96.00.99.00.01"},
		{GPU: "1", UUID: "GPU-66666666-7777-8888-9999-000000000000", Name: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:2A:00.0",
			Serial: "1650223000002", DriverVersion: "570.124.06", CUDADriverVersion: "12.8", VBIOSVersion: "96.00.99.00.01"},
	}
	if len(got.GPUs) != len(want) {
		t.Fatalf("GPUs = %+v", got.GPUs)
	}
	for i := range want {
		if got.GPUs[i] != want[i] {
			t.Errorf("GPU %d = %+v, want %+v", i, got.GPUs[i], want[i])
		}
	}
	if len(got.MIG) != 1 || got.MIG[0].GPU != "1" || got.MIG[0].Profile != "3g.40gb" || got.MIG[0].Labels["mig_uuid"] != "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee" {
		t.Errorf("MIG = %+v, want one 3g.40gb instance on GPU 1 (listed once although seen twice)", got.MIG)
	}
	// Peak over both GPUs and both polls; mean over 4 readings.
	if got.PeakMemoryUsedBytes != 7.5e10 {
		t.Errorf("peak memory = %v, want 7.5e10", got.PeakMemoryUsedBytes)
	}
	if want := (0.9 + 0.1 + 0.7 + 0.3) / 4; got.MeanUtilizationRatio != want {
		t.Errorf("mean utilisation = %v, want %v", got.MeanUtilizationRatio, want)
	}
	if got.Samples != 2 || got.Error != "" || got.ExporterURL != srv.URL+"/metrics" {
		t.Errorf("samples %d error %q url %q", got.Samples, got.Error, got.ExporterURL)
	}

	// A failed poll keeps what was seen and records the error.
	err := p.Poll(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("third poll: %v, want HTTP 500", err)
	}
	got = p.Info()
	if !strings.Contains(got.Error, "HTTP 500") || got.Samples != 2 || len(got.GPUs) != 2 || got.PeakMemoryUsedBytes != 7.5e10 {
		t.Errorf("after failure: %+v", got)
	}
	// Info returns a copy.
	got.GPUs[0].Name = "changed"
	if p.Info().GPUs[0].Name != "NVIDIA H100 80GB HBM3" {
		t.Error("Info shares its GPU slice with the poller")
	}
}

func TestIngestErrors(t *testing.T) {
	p := NewPoller("http://127.0.0.1:1/metrics", 0, slog.New(slog.DiscardHandler))
	if err := p.Ingest(strings.NewReader("gpulens_gpu_info{gpu=\"0\" 1\n")); err == nil || !strings.Contains(err.Error(), "parsing metrics from http://127.0.0.1:1/metrics") {
		t.Errorf("bad text: %v", err)
	}
	if err := p.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "scraping http://127.0.0.1:1/metrics") {
		t.Errorf("unreachable exporter: %v", err)
	}
	if err := p.Ingest(strings.NewReader("# TYPE other gauge\nother 1\n")); err != nil {
		t.Fatal(err)
	}
	if got := p.Info(); got.Samples != 1 || got.Error != "" || len(got.GPUs) != 0 || got.MeanUtilizationRatio != 0 {
		t.Errorf("scrape without GPU metrics: %+v", got)
	}
}
