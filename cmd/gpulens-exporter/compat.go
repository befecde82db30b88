package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/collector"
)

// dcgmPath is where the main listener serves the DCGM-compatible view.
const dcgmPath = "/dcgm/metrics"

// compatFlags configures the DCGM-compatible view (docs/dcgm-migration.md).
type compatFlags struct {
	dcgm         bool
	dcgmListen   string
	profFallback bool
}

func addCompatFlags(app *kingpin.Application, f *compatFlags) {
	app.Flag("compat.dcgm", "Serve a DCGM-compatible view of the same snapshot at "+dcgmPath+": dcgm-exporter's default counters with its names, units and labels, for dashboards, autoscalers and alerts written for dcgm-exporter (docs/dcgm-migration.md). Off: nothing is converted.").Default("false").BoolVar(&f.dcgm)
	app.Flag("compat.dcgm.listen-address", "Also serve the DCGM-compatible view at /metrics on this address of its own (e.g. :9400, dcgm-exporter's port), for consumers hard-wired to it, in plain HTTP (--web.config.file applies to the main listener only); implies --compat.dcgm. Empty: no extra listener.").Default("").StringVar(&f.dcgmListen)
	app.Flag("compat.dcgm.prof-fallback", "In the DCGM-compatible view, on GPUs without GPM (before Hopper, or --no-collector.gpm), serve DCGM_FI_PROF_GR_ENGINE_ACTIVE from NVML's GPU utilisation and DCGM_FI_PROF_DRAM_ACTIVE from its memory utilisation, as ratios labelled gpulens_source=\"nvml_utilization\" and \"nvml_memory_utilization\" (docs/dcgm-migration.md); --no-compat.dcgm.prof-fallback leaves those fields absent there, as before. No tensor field has a fallback.").Default("true").BoolVar(&f.profFallback)
}

// enabled reports whether the view is served at all.
func (f compatFlags) enabled() bool { return f.dcgm || f.dcgmListen != "" }

// validate checks the listen address before anything starts.
func (f compatFlags) validate() error {
	if f.dcgmListen == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(f.dcgmListen); err != nil {
		return fmt.Errorf("--compat.dcgm.listen-address %q: %w", f.dcgmListen, err)
	}
	return nil
}

// dcgmHostname is the Hostname label, as dcgm-exporter chooses it: the
// NODE_NAME environment variable (set from the pod's spec.nodeName in
// Kubernetes), else the host name.
func dcgmHostname() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

// startCompat builds the DCGM view and, with --compat.dcgm.listen-address,
// starts its own listener, stopped when ctx ends. It returns nil when the
// view is off.
func startCompat(ctx context.Context, f compatFlags, sampler *collector.Sampler, maxRequests int, wg *sync.WaitGroup, logger *slog.Logger) (http.Handler, error) {
	if !f.enabled() {
		return nil, nil
	}
	view := collector.NewDCGMExposition(sampler, collector.DCGMOptions{
		Hostname:     dcgmHostname(),
		ProfFallback: f.profFallback,
		Exposition:   collector.ExpositionOptions{MaxRequestsInFlight: maxRequests, Logger: logger},
	})
	if f.dcgmListen == "" {
		return view, nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.dcgmListen)
	if err != nil {
		return nil, fmt.Errorf("--compat.dcgm.listen-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", view)
	srv := newHTTPServer(mux, logger)
	logger.Info("serving the DCGM-compatible view", "address", ln.Addr().String(), "path", "/metrics")
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serving the DCGM-compatible view", "address", f.dcgmListen, "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return view, nil
}
