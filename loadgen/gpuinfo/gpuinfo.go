// Package gpuinfo polls a gpulens exporter's /metrics during a run and
// records the GPUs it serves (model, driver, CUDA, MIG profile), their peak
// memory use and mean utilisation.
package gpuinfo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulens/gpulens/loadgen/report"
)

// Poller scrapes the exporter every interval.
type Poller struct {
	url      string
	interval time.Duration
	logger   *slog.Logger
	http     *http.Client

	mu      sync.Mutex
	info    report.GPUInfo
	utilSum float64
	utilN   int
	lastErr error
}

// NewPoller returns a poller for the exporter metrics URL.
func NewPoller(url string, interval time.Duration, logger *slog.Logger) *Poller {
	return &Poller{url: url, interval: interval, logger: logger, http: &http.Client{Timeout: 5 * time.Second},
		info: report.GPUInfo{ExporterURL: url}}
}

// Run polls until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		if err := p.Poll(ctx); err != nil {
			p.logger.Warn("polling gpulens exporter", "url", p.url, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll scrapes once.
func (p *Poller) Poll(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return p.fail(fmt.Errorf("exporter %q: %w", p.url, err))
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := p.http.Do(req)
	if err != nil {
		return p.fail(fmt.Errorf("scraping %s: %w", p.url, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return p.fail(fmt.Errorf("scraping %s: HTTP %d", p.url, resp.StatusCode))
	}
	return p.Ingest(resp.Body)
}

// Ingest parses one scrape in the text format.
func (p *Poller) Ingest(r io.Reader) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return p.fail(fmt.Errorf("parsing metrics from %s: %w", p.url, err))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = nil
	p.info.Error = ""
	p.info.Samples++
	if f := fams["gpulens_gpu_info"]; f != nil {
		p.info.GPUs = p.info.GPUs[:0]
		for _, m := range f.GetMetric() {
			l := labels(m)
			p.info.GPUs = append(p.info.GPUs, report.GPU{GPU: l["gpu"], UUID: l["uuid"], Name: l["name"], PCIBusID: l["pci_bus_id"],
				Serial: l["serial"], DriverVersion: l["driver_version"], CUDADriverVersion: l["cuda_driver_version"], VBIOSVersion: l["vbios_version"]})
		}
	}
	if f := fams["gpulens_mig_instance_info"]; f != nil {
		p.info.MIG = p.info.MIG[:0]
		for _, m := range f.GetMetric() {
			l := labels(m)
			p.info.MIG = append(p.info.MIG, report.MIGInstance{GPU: l["gpu"], Profile: l["profile"], Labels: l})
		}
	}
	if f := fams["gpulens_gpu_memory_used_bytes"]; f != nil {
		for _, m := range f.GetMetric() {
			p.info.PeakMemoryUsedBytes = max(p.info.PeakMemoryUsedBytes, value(m))
		}
	}
	if f := fams["gpulens_gpu_utilization_ratio"]; f != nil {
		for _, m := range f.GetMetric() {
			p.utilSum += value(m)
			p.utilN++
		}
		if p.utilN > 0 {
			p.info.MeanUtilizationRatio = p.utilSum / float64(p.utilN)
		}
	}
	return nil
}

func (p *Poller) fail(err error) error {
	p.mu.Lock()
	p.lastErr = err
	p.info.Error = err.Error()
	p.mu.Unlock()
	return err
}

// Info returns what was seen so far.
func (p *Poller) Info() *report.GPUInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.info
	c.GPUs = append([]report.GPU(nil), p.info.GPUs...)
	c.MIG = append([]report.MIGInstance(nil), p.info.MIG...)
	return &c
}

func labels(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
