package collector

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Exposition serves the sampler's snapshot, together with the exporter's own
// metrics, as pre-rendered text. Rendering (gather, text encoding, gzip) runs
// off the scrape path once per sampler interval while someone scrapes, so a
// scrape only writes bytes: its cost no longer grows with the number of
// series. A request for the protobuf format is served live through promhttp.
type Exposition struct {
	gatherer prometheus.Gatherer
	interval time.Duration
	idle     time.Duration // stop rendering in the background after this long without a scrape
	now      func() time.Time
	logger   *slog.Logger
	fallback http.Handler
	inFlight chan struct{}

	renderMu   sync.Mutex // one render at a time
	current    atomic.Pointer[rendered]
	lastScrape atomic.Int64 // UnixNano
}

type rendered struct {
	at    time.Time
	plain []byte
	gz    []byte
}

// ExpositionOptions configures NewExposition.
type ExpositionOptions struct {
	// MaxRequestsInFlight limits concurrent scrapes (0: no limit).
	MaxRequestsInFlight int
	Logger              *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewExposition serves what the given registry gathers plus the sampler's
// snapshot. reg must not contain the sampler itself: register the sampler's
// Live collector there instead.
func NewExposition(s *Sampler, reg prometheus.Gatherer, opts ExpositionOptions) *Exposition {
	snapshotReg := prometheus.NewRegistry()
	snapshotReg.MustRegister(snapshotCollector{s})
	g := prometheus.Gatherers{snapshotReg, reg}
	e := &Exposition{
		gatherer: g,
		interval: s.cfg.Interval,
		idle:     10 * time.Minute,
		now:      opts.Now,
		logger:   opts.Logger,
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.logger == nil {
		e.logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxRequestsInFlight > 0 {
		e.inFlight = make(chan struct{}, opts.MaxRequestsInFlight)
	}
	e.fallback = promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(e.logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
	return e
}

// Gather implements prometheus.Gatherer: a live gather of what the
// exposition serves.
func (e *Exposition) Gather() ([]*dto.MetricFamily, error) { return e.gatherer.Gather() }

// Run re-renders once per sampler interval while scrapes keep coming.
func (e *Exposition) Run(ctx context.Context) {
	t := time.NewTicker(e.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if e.now().Sub(time.Unix(0, e.lastScrape.Load())) < e.idle {
				if _, err := e.render(); err != nil {
					e.logger.Error("rendering metrics", "err", err)
				}
			}
		}
	}
}

// render gathers and encodes everything once.
func (e *Exposition) render() (*rendered, error) {
	e.renderMu.Lock()
	defer e.renderMu.Unlock()
	mfs, gatherErr := e.gatherer.Gather()
	var plain bytes.Buffer
	if prev := e.current.Load(); prev != nil {
		plain.Grow(len(prev.plain) + 4096)
	}
	enc := expfmt.NewEncoder(&plain, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encoding %s: %w", mf.GetName(), err)
		}
	}
	var gz bytes.Buffer
	gz.Grow(plain.Len() / 4)
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	_, _ = zw.Write(plain.Bytes())
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing metrics: %w", err)
	}
	r := &rendered{at: e.now(), plain: plain.Bytes(), gz: gz.Bytes()}
	e.current.Store(r)
	if gatherErr != nil {
		e.logger.Warn("gathering metrics", "err", gatherErr)
	}
	return r, nil
}

// ServeHTTP implements http.Handler.
func (e *Exposition) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if e.inFlight != nil {
		select {
		case e.inFlight <- struct{}{}:
			defer func() { <-e.inFlight }()
		default:
			http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", cap(e.inFlight)), http.StatusServiceUnavailable)
			return
		}
	}
	now := e.now()
	e.lastScrape.Store(now.UnixNano())
	if expfmt.Negotiate(req.Header).FormatType() == expfmt.TypeProtoDelim {
		e.fallback.ServeHTTP(w, req)
		return
	}
	r := e.current.Load()
	if r == nil || now.Sub(r.at) > 2*e.interval {
		// First scrape, or the first after an idle spell: render now.
		var err error
		if r, err = e.render(); err != nil {
			http.Error(w, "An error has occurred while rendering metrics:\n\n"+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	h.Set("Vary", "Accept-Encoding")
	body := r.plain
	if acceptsGzip(req.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		body = r.gz
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	_, _ = w.Write(body)
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		fields := strings.Split(part, ";")
		if !strings.EqualFold(strings.TrimSpace(fields[0]), "gzip") {
			continue
		}
		for _, p := range fields[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(k, "q") {
				if q, err := strconv.ParseFloat(v, 64); err == nil && q == 0 {
					return false
				}
			}
		}
		return true
	}
	return false
}

// snapshotCollector collects only the snapshot (no live counters). It is
// unchecked: the snapshot's series change with the fleet.
type snapshotCollector struct{ s *Sampler }

func (snapshotCollector) Describe(chan<- *prometheus.Desc) {}

func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.s.snap.Load().Metrics {
		ch <- m
	}
}

// Live returns a collector of the sampler's metrics that are not part of the
// snapshot (NVML error counters, cycle durations, XID counters), for a
// registry served together with the snapshot by an Exposition.
func (s *Sampler) Live() prometheus.Collector { return liveCollector{s} }

type liveCollector struct{ s *Sampler }

func (c liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- xidDesc
	ch <- lastXIDDesc
	c.s.errors.Describe(ch)
	c.s.cycleDuration.Describe(ch)
}

func (c liveCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.xid != nil {
		for _, m := range c.s.xid.metrics() {
			ch <- m
		}
	}
	c.s.errors.Collect(ch)
	c.s.cycleDuration.Collect(ch)
}
