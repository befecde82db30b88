package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
)

// linger keeps serving /metrics for --linger after the run, until ctx is
// cancelled or the server fails. It returns only the server's failure.
func linger(ctx context.Context, logger *slog.Logger, f *loadFlags, srvErr <-chan error) error {
	address := strings.Join(*f.web.WebListenAddresses, ",")
	if f.web.WebSystemdSocket != nil && *f.web.WebSystemdSocket {
		address = "systemd socket"
	}
	logger.Info("run finished; serving metrics until the linger ends (Ctrl-C to exit now)", "address", address,
		"path", f.metricsPath, "linger", f.linger, "until", time.Now().Add(f.linger).Format(time.RFC3339))
	t := time.NewTimer(f.linger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case err := <-srvErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return nil
}

// serveMetrics serves /metrics and a landing page until ctx ends.
func serveMetrics(ctx context.Context, logger *slog.Logger, f *loadFlags, reg *prometheus.Registry) <-chan error {
	errc := make(chan error, 1)
	mux := http.NewServeMux()
	mux.Handle(f.metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	if f.metricsPath != "/" {
		lp, err := web.NewLandingPage(web.LandingConfig{
			Name: "gpulens-loadgen", Description: "Load generator for OpenAI-compatible inference servers", Version: version.Info(),
			Links: []web.LandingLinks{{Address: f.metricsPath, Text: "Metrics"}},
		})
		if err != nil {
			errc <- err
			return errc
		}
		mux.Handle("/", lp)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		errc <- web.ListenAndServe(srv, f.web, logger)
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return errc
}
