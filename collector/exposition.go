package collector

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
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
// metrics, in every scrape format: the text format, OpenMetrics and
// delimited protobuf. A scrape groups the snapshot into families (and
// collects the exporter's own metrics) only when the sampler has published
// a snapshot since the last grouping, or the last one is older than one
// sampler interval; each format's body (encoded, gzipped) is then built
// from those families on the first scrape that asks for it and shared by
// every later scrape of the same snapshot. So the exporter renders at most
// once per new snapshot and format that someone actually scrapes: nothing
// while nobody scrapes, once per scrape at any real scrape interval, and
// at most once per snapshot when scraped back to back. Concurrent scrapes
// share one render. Only the rare protobuf text and compact-text formats
// are served live through promhttp.
type Exposition struct {
	sampler  *Sampler
	live     prometheus.Gatherer // the registry served with the snapshot
	gatherer prometheus.Gatherer // both, for live gathers
	maxAge   time.Duration       // re-render after this long even without a new snapshot
	now      func() time.Time
	logger   *slog.Logger
	fallback http.Handler
	inFlight chan struct{}
	// accepted are the formats negotiated, by preference.
	accepted []expfmt.Format
	// transform, if set, replaces the snapshot's metrics by what it appends
	// to its second argument (the DCGM-compatible view); nil serves the
	// snapshot itself.
	transform func(*Snapshot, []prometheus.Metric) []prometheus.Metric

	renderMu sync.Mutex   // one render at a time; scrapes waiting for it share it
	zw       *gzip.Writer // klauspost's: 2.5 times as fast as compress/gzip; guarded by renderMu
	scratch  bytes.Buffer // the body being encoded, reused; guarded by renderMu
	text     snapshotText // guarded by renderMu
	// The families of the current render, valid while current is the
	// render they were grouped for; guarded by renderMu.
	fams      []snapFamily
	liveFams  []*dto.MetricFamily
	mf        dto.MetricFamily    // scratch; guarded by renderMu
	converted []prometheus.Metric // transform's output, reused; guarded by renderMu
	current   atomic.Pointer[rendered]
	renders   atomic.Uint64 // groupings so far (tests and benchmarks)
	encodes   [numFormats]atomic.Uint64
}

// format is a scrape format the exposition pre-renders.
type format int

const (
	formatText format = iota
	formatOpenMetrics
	formatProtobuf
	numFormats
)

var formatNames = [numFormats]string{"text", "openmetrics", "protobuf"}

func (f format) String() string { return formatNames[f] }

// contentType is the Content-Type of a pre-rendered body.
var contentType = [numFormats]string{
	string(expfmt.NewFormat(expfmt.TypeTextPlain)),
	string(expfmt.NewFormat(expfmt.TypeOpenMetrics)),
	string(expfmt.NewFormat(expfmt.TypeProtoDelim)),
}

// rendered is one grouping of a snapshot and the bodies encoded from it.
type rendered struct {
	seq    uint64    // the sampler snapshot gathered (at least this one)
	at     time.Time // when it was grouped
	bodies [numFormats]atomic.Pointer[body]
}

// body is one format's exposition of a render.
type body struct {
	gz []byte // gzipped: Prometheus always asks for gzip

	// The body itself, for clients that do not accept gzip: decompressed
	// on the first such request.
	plainOnce sync.Once
	plain     []byte
	plainErr  error
}

// text returns the uncompressed text exposition of r, if it was encoded.
func (r *rendered) text() ([]byte, error) {
	b := r.bodies[formatText].Load()
	if b == nil {
		return nil, errors.New("the text format was not rendered")
	}
	return b.uncompressed()
}

// uncompressed returns the body decompressed.
func (b *body) uncompressed() ([]byte, error) {
	b.plainOnce.Do(func() {
		zr, err := gzip.NewReader(bytes.NewReader(b.gz))
		if err != nil {
			b.plainErr = err
			return
		}
		b.plain, b.plainErr = io.ReadAll(zr)
	})
	return b.plain, b.plainErr
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
	return newExposition(s, reg, opts, nil, expfmt.DefaultOpenMetricsAcceptedFormats())
}

func newExposition(s *Sampler, reg prometheus.Gatherer, opts ExpositionOptions,
	transform func(*Snapshot, []prometheus.Metric) []prometheus.Metric, accepted []expfmt.Format) *Exposition {
	e := &Exposition{
		sampler:   s,
		live:      reg,
		maxAge:    s.cfg.Interval,
		now:       opts.Now,
		logger:    opts.Logger,
		transform: transform,
		accepted:  accepted,
	}
	snapshotReg := prometheus.NewRegistry()
	snapshotReg.MustRegister(viewCollector{e})
	g := prometheus.Gatherers{snapshotReg, reg}
	e.gatherer = g
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
		ErrorLog:          slog.NewLogLogger(e.logger.Handler(), slog.LevelError),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: slices.ContainsFunc(accepted, func(f expfmt.Format) bool { return f.FormatType() == expfmt.TypeOpenMetrics }),
	})
	return e
}

// Gather implements prometheus.Gatherer: a live gather of what the
// exposition serves.
func (e *Exposition) Gather() ([]*dto.MetricFamily, error) { return e.gatherer.Gather() }

// snapshotMetrics returns what the exposition serves of a snapshot: the
// snapshot's metrics, or their transform appended to buf.
func (e *Exposition) snapshotMetrics(snap *Snapshot, buf []prometheus.Metric) []prometheus.Metric {
	if e.transform == nil {
		return snap.Metrics
	}
	return e.transform(snap, buf)
}

// fresh reports whether r may answer a scrape that arrived at now, when the
// sampler's latest snapshot was seq.
func (e *Exposition) fresh(r *rendered, seq uint64, now time.Time) bool {
	return r != nil && r.seq >= seq && now.Sub(r.at) < e.maxAge
}

// latest returns the body in format f of a render at least as new as the
// sampler's snapshot when the scrape arrived, rendering if there is none.
// A scrape that finds another one rendering waits for that render and
// serves it.
func (e *Exposition) latest(f format) (*body, error) {
	seq, now := e.sampler.snap.Load().seq, e.now()
	if r := e.current.Load(); e.fresh(r, seq, now) {
		if b := r.bodies[f].Load(); b != nil {
			return b, nil
		}
	}
	e.renderMu.Lock()
	defer e.renderMu.Unlock()
	r := e.current.Load()
	if !e.fresh(r, seq, now) {
		var err error
		if r, err = e.group(); err != nil {
			return nil, err
		}
	}
	if b := r.bodies[f].Load(); b != nil {
		return b, nil // rendered while this scrape waited
	}
	return e.encode(r, f)
}

// render groups the latest snapshot and encodes it as text; renderMu must
// be held.
func (e *Exposition) render() (*rendered, error) {
	r, err := e.group()
	if err != nil {
		return nil, err
	}
	if _, err := e.encode(r, formatText); err != nil {
		return nil, err
	}
	return r, nil
}

// group sorts the latest snapshot and the registry's metrics into
// families, kept for encode, and publishes a render without bodies;
// renderMu must be held.
func (e *Exposition) group() (*rendered, error) {
	snap := e.sampler.snap.Load()
	ms := snap.Metrics
	if e.transform != nil {
		e.converted = e.transform(snap, e.converted[:0])
		ms = e.converted
	}
	fams, live, warn, err := e.text.gather(ms, e.live)
	if e.transform != nil {
		clear(e.converted) // drop the references until the next render
	}
	if err == nil {
		err = disjoint(fams, live)
	}
	var both errFamilyInBoth
	if errors.As(err, &both) {
		// A family in two places: let the registries merge it.
		fams = nil
		live, warn = e.gatherer.Gather()
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if warn != nil {
		e.logger.Warn("gathering metrics", "err", warn)
	}
	e.fams, e.liveFams = fams, live
	r := &rendered{seq: snap.seq, at: e.now()}
	e.current.Store(r)
	e.renders.Add(1)
	return r, nil
}

// encode writes the body of r in format f from the families grouped for
// the current render (r itself, or a newer one: both are fresh); renderMu
// must be held.
func (e *Exposition) encode(r *rendered, f format) (*body, error) {
	if cur := e.current.Load(); cur != r {
		if b := cur.bodies[f].Load(); b != nil {
			return b, nil
		}
		r = cur
	}
	plain := &e.scratch
	plain.Reset()
	var err error
	switch f {
	case formatText:
		err = e.text.write(plain, e.fams, e.liveFams, false)
	case formatOpenMetrics:
		err = e.text.write(plain, e.fams, e.liveFams, true)
	case formatProtobuf:
		err = e.eachFamily(func(mf *dto.MetricFamily) error {
			return e.text.writeFamilyProto(plain, mf)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("encoding the %s format: %w", f, err)
	}
	var gz bytes.Buffer
	if prev := r.bodies[formatText].Load(); prev != nil {
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
	b := &body{gz: gz.Bytes()}
	r.bodies[f].Store(b)
	e.encodes[f].Add(1)
	return b, nil
}

// eachFamily calls fn with every family of the current render in name
// order, the snapshot's merged with the registry's; renderMu must be held.
// The family passed is valid only during the call.
func (e *Exposition) eachFamily(fn func(*dto.MetricFamily) error) error {
	snap, live := e.fams, e.liveFams
	i, j := 0, 0
	for i < len(snap) || j < len(live) {
		if j == len(live) || (i < len(snap) && snap[i].meta.name < live[j].GetName()) {
			f := snap[i]
			i++
			if len(f.metrics) == 0 {
				continue
			}
			e.mf = dto.MetricFamily{Name: &f.meta.name, Help: &f.meta.help, Type: &f.meta.typ, Metric: f.metrics}
			if err := fn(&e.mf); err != nil {
				return fmt.Errorf("encoding %s: %w", f.meta.name, err)
			}
			continue
		}
		if err := fn(live[j]); err != nil {
			return fmt.Errorf("encoding %s: %w", live[j].GetName(), err)
		}
		j++
	}
	e.mf = dto.MetricFamily{}
	return nil
}

// renderGathered is the general render of format f (tests compare the
// pre-rendered bodies with it): a gather of the snapshot and the registry
// together, encoded by expfmt.
func (e *Exposition) renderGathered(buf *bytes.Buffer, f format) (warn, err error) {
	mfs, warn := e.gatherer.Gather()
	enc := expfmt.NewEncoder(buf, expfmt.Format(contentType[f]))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return warn, fmt.Errorf("encoding %s: %w", mf.GetName(), err)
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		if err := c.Close(); err != nil {
			return warn, err
		}
	}
	return warn, nil
}

// disjoint reports a family name in both the snapshot's families and the
// registry's (both sorted by name).
func disjoint(snap []snapFamily, live []*dto.MetricFamily) error {
	i, j := 0, 0
	for i < len(snap) && j < len(live) {
		switch c := strings.Compare(snap[i].meta.name, live[j].GetName()); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			return errFamilyInBoth{snap[i].meta.name}
		}
	}
	return nil
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
	var f format
	switch expfmt.NegotiateAccept(req.Header, e.accepted...).FormatType() {
	case expfmt.TypeTextPlain:
		f = formatText
	case expfmt.TypeOpenMetrics:
		f = formatOpenMetrics
	case expfmt.TypeProtoDelim:
		f = formatProtobuf
	default: // protobuf text or compact text: for people, not scrapers
		e.fallback.ServeHTTP(w, req)
		return
	}
	b, err := e.latest(f)
	if err != nil {
		http.Error(w, "An error has occurred while rendering metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	h.Set("Content-Type", contentType[f])
	h.Set("Vary", "Accept-Encoding")
	out := b.gz
	if acceptsGzip(req.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
	} else if out, err = b.uncompressed(); err != nil {
		http.Error(w, "An error has occurred while decompressing metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(out)))
	if req.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(out)
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

// viewCollector collects what an Exposition serves of the snapshot (the
// snapshot, or its transform), unchecked.
type viewCollector struct{ e *Exposition }

func (viewCollector) Describe(chan<- *prometheus.Desc) {}

func (c viewCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.e.snapshotMetrics(c.e.sampler.snap.Load(), nil) {
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
