package collector

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Exposition serves the sampler's snapshot, together with the exporter's own
// metrics, as rendered text. A scrape renders (gather, text encoding, gzip)
// only when the sampler has published a snapshot since the last render, or
// the last render is older than one sampler interval; otherwise it writes the
// bytes of the last render. So the exporter renders at most once per new
// snapshot that someone actually scrapes: nothing while nobody scrapes, once
// per scrape at any real scrape interval, and at most once per snapshot when
// scraped back to back. Concurrent scrapes share one render. A request for
// the protobuf format is served live through promhttp.
type Exposition struct {
	sampler  *Sampler
	live     prometheus.Gatherer // the registry served with the snapshot
	gatherer prometheus.Gatherer // both, for live gathers
	maxAge   time.Duration       // re-render after this long even without a new snapshot
	now      func() time.Time
	logger   *slog.Logger
	fallback http.Handler
	inFlight chan struct{}

	renderMu sync.Mutex   // one render at a time; scrapes waiting for it share it
	zw       *gzip.Writer // klauspost's: 2.5 times as fast as compress/gzip; guarded by renderMu
	scratch  bytes.Buffer // the text being rendered, reused; guarded by renderMu
	text     snapshotText // guarded by renderMu
	current  atomic.Pointer[rendered]
	renders  atomic.Uint64 // renders so far (tests and benchmarks)
}

type rendered struct {
	seq uint64    // the sampler snapshot gathered (at least this one)
	at  time.Time // when it was rendered
	gz  []byte    // the text, gzipped: Prometheus always asks for gzip

	// The text itself, for clients that do not accept gzip: decompressed
	// on the first such request.
	plainOnce sync.Once
	plain     []byte
	plainErr  error
}

// text returns the uncompressed exposition.
func (r *rendered) text() ([]byte, error) {
	r.plainOnce.Do(func() {
		zr, err := gzip.NewReader(bytes.NewReader(r.gz))
		if err != nil {
			r.plainErr = err
			return
		}
		r.plain, r.plainErr = io.ReadAll(zr)
	})
	return r.plain, r.plainErr
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
// Live collector there instead. The registry's metrics (the exporter's own,
// the probe's) are rendered with the snapshot, so they are at most one
// sampler interval older than the scrape. With a *Registry its collectors
// are collected on the rendering goroutine and written like the snapshot
// (cheaper); any other Gatherer is gathered.
func NewExposition(s *Sampler, reg prometheus.Gatherer, opts ExpositionOptions) *Exposition {
	snapshotReg := prometheus.NewRegistry()
	snapshotReg.MustRegister(snapshotCollector{s})
	g := prometheus.Gatherers{snapshotReg, reg}
	e := &Exposition{
		sampler:  s,
		live:     reg,
		gatherer: g,
		maxAge:   s.cfg.Interval,
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

// fresh reports whether r may answer a scrape that arrived at now, when the
// sampler's latest snapshot was seq.
func (e *Exposition) fresh(r *rendered, seq uint64, now time.Time) bool {
	return r != nil && r.seq >= seq && now.Sub(r.at) < e.maxAge
}

// latest returns a render at least as new as the sampler's snapshot when
// the scrape arrived, rendering if there is none. A scrape that finds
// another one rendering waits for that render and serves it.
func (e *Exposition) latest() (*rendered, error) {
	seq, now := e.sampler.snap.Load().seq, e.now()
	if r := e.current.Load(); e.fresh(r, seq, now) {
		return r, nil
	}
	e.renderMu.Lock()
	defer e.renderMu.Unlock()
	if r := e.current.Load(); e.fresh(r, seq, now) {
		return r, nil // rendered while this scrape waited
	}
	return e.render()
}

// render gathers and encodes everything once; renderMu must be held.
func (e *Exposition) render() (*rendered, error) {
	snap := e.sampler.snap.Load()
	plain := &e.scratch
	plain.Reset()
	warn, err := e.text.render(plain, snap.Metrics, e.live)
	var both errFamilyInBoth
	if errors.As(err, &both) {
		// A family in two places: let the registries merge it.
		plain.Reset()
		warn, err = e.renderGathered(plain)
	}
	if err != nil {
		return nil, err
	}
	if warn != nil {
		e.logger.Warn("gathering metrics", "err", warn)
	}
	var gz bytes.Buffer
	if prev := e.current.Load(); prev != nil {
		gz.Grow(len(prev.gz) + len(prev.gz)/8)
	} else {
		gz.Grow(plain.Len() / 4)
	}
	if e.zw == nil {
		e.zw, _ = gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	} else {
		e.zw.Reset(&gz) // a new compressor costs hundreds of KB of allocations
	}
	_, _ = e.zw.Write(plain.Bytes())
	if err := e.zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing metrics: %w", err)
	}
	r := &rendered{seq: snap.seq, at: e.now(), gz: gz.Bytes()}
	e.current.Store(r)
	e.renders.Add(1)
	return r, nil
}

// renderGathered is the general render: a gather of the snapshot and the
// registry together, encoded by expfmt.
func (e *Exposition) renderGathered(buf *bytes.Buffer) (warn, err error) {
	mfs, warn := e.gatherer.Gather()
	enc := expfmt.NewEncoder(buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return warn, fmt.Errorf("encoding %s: %w", mf.GetName(), err)
		}
	}
	return warn, nil
}

// ServeHTTP implements http.Handler. Only GET and HEAD are allowed.
func (e *Exposition) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	if req.ContentLength != 0 {
		// A scrape has no body. Do not read one, nor wait for one promised
		// and never sent (net/http would drain it before answering, holding
		// a --web.max-requests slot): answer and close the connection.
		h.Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "Method not allowed: the metrics are read with GET or HEAD.", http.StatusMethodNotAllowed)
		return
	}
	if e.inFlight != nil {
		select {
		case e.inFlight <- struct{}{}:
			defer func() { <-e.inFlight }()
		default:
			http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", cap(e.inFlight)), http.StatusServiceUnavailable)
			return
		}
	}
	if expfmt.Negotiate(req.Header).FormatType() == expfmt.TypeProtoDelim {
		e.fallback.ServeHTTP(w, req)
		return
	}
	r, err := e.latest()
	if err != nil {
		http.Error(w, "An error has occurred while rendering metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	h.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	h.Set("Vary", "Accept-Encoding")
	body := r.gz
	if acceptsGzip(req.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
	} else if body, err = r.text(); err != nil {
		http.Error(w, "An error has occurred while decompressing metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if req.Method == http.MethodHead {
		return
	}
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
