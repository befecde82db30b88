package testenv

import (
	"context"
	"fmt"
	"time"
)

// ScrapeExporter runs the exporter on a simulated scenario (a built-in name
// or a YAML file) with the probe on, lets it sample for settle and returns
// one scrape. The probe's first run starts at once.
func ScrapeExporter(ctx context.Context, bin, scenario string, settle time.Duration) ([]byte, error) {
	p, err := Start(bin, "--sim.scenario="+scenario, "--web.listen-address=127.0.0.1:0", "--sampler.interval=100ms",
		"--collector.probe", "--collector.probe.interval=1m")
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	addr, err := p.Address(ctx)
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	body, err := Scrape(ctx, "http://"+addr+"/metrics", AcceptText)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", scenario, err)
	}
	return body, nil
}

// ScrapeLoadgen starts the simulated inference server, runs the load
// generator against it and scrapes the load generator's live metrics once
// requests have finished.
func ScrapeLoadgen(ctx context.Context, bin string, settle time.Duration) ([]byte, error) {
	sim, err := Start(bin, "sim", "--sim.listen-address=127.0.0.1:0", "--sim.model=m",
		"--sim.ttft=20ms", "--sim.itl=2ms", "--sim.error-rate=0.1")
	if err != nil {
		return nil, err
	}
	defer sim.Stop()
	simAddr, err := sim.Address(ctx)
	if err != nil {
		return nil, err
	}
	run, err := Start(bin, "run", "--web.listen-address=127.0.0.1:0", "--target=http://"+simAddr+"/v1",
		"--model=m", "--concurrency=4", "--duration=30s", "--output-tokens=fixed:8", "--input-tokens=fixed:16",
		"--cost.gpu-hourly-usd=2.5")
	if err != nil {
		return nil, err
	}
	defer run.Stop()
	addr, err := run.Address(ctx)
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	// As Prometheus scrapes it (deploy/prometheus/prometheus.yml): native
	// histograms included.
	return Scrape(ctx, "http://"+addr+"/metrics", AcceptProtobuf)
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
