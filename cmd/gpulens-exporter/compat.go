package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/gpulens/gpulens/collector"
)

// dcgmPath is where the main listener serves the DCGM-compatible view.
const dcgmPath = "/dcgm/metrics"

// compatFlags configures the DCGM-compatible view (docs/dcgm-migration.md).
type compatFlags struct {
	dcgm         bool
	dcgmListen   string
	profFallback bool
	countersFile string
	counters     *collector.DCGMCounters // loaded by validate
}

func addCompatFlags(app *kingpin.Application, f *compatFlags) {
	app.Flag("compat.dcgm", "Serve a DCGM-compatible view of the same snapshot at "+dcgmPath+": dcgm-exporter's default counters with its names, units and labels, for dashboards, autoscalers and alerts written for dcgm-exporter (docs/dcgm-migration.md). Off: nothing is converted.").Default("false").BoolVar(&f.dcgm)
	app.Flag("compat.dcgm.listen-address", "Also serve the DCGM-compatible view at /metrics, and /health as dcgm-exporter does, on this address of its own (e.g. :9400, dcgm-exporter's port), for consumers hard-wired to it, with the TLS and basic auth of --web.config.file like the main listener; implies --compat.dcgm. Empty: no extra listener.").Default("").StringVar(&f.dcgmListen)
	app.Flag("compat.dcgm.prof-fallback", "In the DCGM-compatible view, on GPUs without GPM (before Hopper, or --no-collector.gpm), serve DCGM_FI_PROF_GR_ENGINE_ACTIVE from NVML's GPU utilisation and DCGM_FI_PROF_DRAM_ACTIVE from its memory utilisation, as ratios labelled gpulens_source=\"nvml_utilization\" and \"nvml_memory_utilization\" (docs/dcgm-migration.md); --no-compat.dcgm.prof-fallback leaves those fields absent there, as before. No tensor field has a fallback.").Default("true").BoolVar(&f.profFallback)
	app.Flag("compat.dcgm.counters-file", "dcgm-exporter's counters file (its -f/--collectors CSV: DCGM field, Prometheus type, help): the DCGM view serves the fields it lists, with its types and help texts, and can add fields outside dcgm-exporter's default set (DCGM_FI_DEV_FB_TOTAL, ...; docs/dcgm-migration.md#the-counters-file); a name that is no DCGM field stops the exporter, a DCGM field gpulens has no value for is logged and skipped; implies --compat.dcgm. Empty: dcgm-exporter's default set.").PlaceHolder("FILE").StringVar(&f.countersFile)
}

// enabled reports whether the view is served at all.
func (f compatFlags) enabled() bool { return f.dcgm || f.dcgmListen != "" || f.countersFile != "" }

// validate checks the listen address and loads the counters file before
// anything starts.
func (f *compatFlags) validate() error {
	if f.dcgmListen != "" {
		if _, _, err := net.SplitHostPort(f.dcgmListen); err != nil {
			return fmt.Errorf("--compat.dcgm.listen-address %q: %w", f.dcgmListen, err)
		}
	}
	if f.countersFile != "" {
		c, err := collector.LoadDCGMCounters(f.countersFile)
		if err != nil {
			return fmt.Errorf("--compat.dcgm.counters-file: %w", err)
		}
		f.counters = c
	}
	return nil
}

// dcgmHealth answers /health as dcgm-exporter does: 200 "OK".
func dcgmHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = io.WriteString(w, "OK")
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
// starts its own listener (with webConfig's TLS and basic auth, as the
// main listener), stopped when ctx ends. It returns nil when the view is
// off.
func startCompat(ctx context.Context, f compatFlags, sampler *collector.Sampler, maxRequests int, webConfig string, wg *sync.WaitGroup, logger *slog.Logger) (http.Handler, error) {
	if !f.enabled() {
		return nil, nil
	}
	if f.counters != nil {
		for _, s := range f.counters.Skipped {
			logger.Warn("--compat.dcgm.counters-file: field skipped", "line", s.String())
		}
		logger.Info("DCGM view fields from --compat.dcgm.counters-file", "file", f.countersFile, "fields", joinNames(f.counters.Fields()))
	}
	view := collector.NewDCGMExposition(sampler, collector.DCGMOptions{
		Hostname:     dcgmHostname(),
		ProfFallback: f.profFallback,
		Counters:     f.counters,
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
	mux.HandleFunc("/health", dcgmHealth)
	srv := newHTTPServer(mux, logger)
	logger.Info("serving the DCGM-compatible view", "address", ln.Addr().String(), "path", "/metrics")
	wg.Add(2)
	go func() {
		defer wg.Done()
		// exporter-toolkit's "Listening on" line is the main listener's
		// (tools read the exporter's address from it): this one has its own.
		quiet := slog.New(dropMessage{logger.Handler(), "Listening on"})
		if err := web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &webConfig}, quiet); err != nil && !errors.Is(err, http.ErrServerClosed) {
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

// dropMessage is a slog.Handler that drops the records with one message.
type dropMessage struct {
	slog.Handler
	msg string
}

func (h dropMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h dropMessage) WithAttrs(attrs []slog.Attr) slog.Handler {
	return dropMessage{h.Handler.WithAttrs(attrs), h.msg}
}

func (h dropMessage) WithGroup(name string) slog.Handler {
	return dropMessage{h.Handler.WithGroup(name), h.msg}
}
