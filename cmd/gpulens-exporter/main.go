// Command gpulens-exporter exports NVIDIA GPU metrics to Prometheus. A
// background sampler reads NVML (or a simulated fleet) and /metrics serves
// the latest snapshot without ever calling NVML.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/pricing"
	"github.com/gpulens/gpulens/internal/sim/simflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// minSamplerInterval is the shortest --sampler.interval accepted.
const minSamplerInterval = 100 * time.Millisecond

// options holds the parsed command line.
type options struct {
	metricsPath   string
	maxRequests   int
	interval      time.Duration
	deviceTimeout time.Duration
	sim           *simflag.Flags
	collectors    map[string]*bool
	xid           *bool
	attribution   attributionFlags
	probe         probeFlags
	probeConfig   gpuprobe.Config
	cost          costFlags
	compat        compatFlags
	web           *web.FlagConfig
	log           *promslog.Config
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	app, o := newApp(stderr)
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}
	if err := o.sim.Validate(time.Now()); err != nil {
		return nil, err
	}
	if o.interval < minSamplerInterval {
		return nil, fmt.Errorf("--sampler.interval must be at least %s, got %s: every GPU is read once per interval, and shorter intervals only burn CPU", minSamplerInterval, o.interval)
	}
	if o.deviceTimeout <= 0 {
		return nil, fmt.Errorf("--sampler.device-timeout must be positive, got %s", o.deviceTimeout)
	}
	if o.maxRequests < 0 {
		return nil, fmt.Errorf("--web.max-requests must not be negative, got %d", o.maxRequests)
	}
	if o.metricsPath == "" || o.metricsPath[0] != '/' {
		return nil, fmt.Errorf("--web.telemetry-path must start with '/', got %q", o.metricsPath)
	}
	if err := o.attribution.validate(); err != nil {
		return nil, err
	}
	if err := o.compat.validate(); err != nil {
		return nil, err
	}
	probeConfig, err := o.probe.config()
	if err != nil {
		return nil, err
	}
	o.probeConfig = probeConfig
	if err := o.cost.validate(); err != nil {
		return nil, err
	}
	if files := *o.web.WebConfigFile; files != "" {
		if err := web.Validate(files); err != nil {
			return nil, fmt.Errorf("--web.config.file %s: %w", files, err)
		}
	}
	return o, nil
}

// newApp declares the exporter's flags, stored in the options it returns.
func newApp(stderr io.Writer) (*kingpin.Application, *options) {
	app := kingpin.New("gpulens-exporter", "Prometheus exporter for NVIDIA GPUs: device, process, MIG and contention metrics from NVML, sampled in the background.")
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	o := &options{collectors: map[string]*bool{}, log: &promslog.Config{Writer: stderr}}
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&o.metricsPath)
	app.Flag("web.max-requests", "Maximum number of parallel scrape requests. Use 0 to disable.").Default("40").IntVar(&o.maxRequests)
	cliflag.Duration(app, "sampler.interval", "How often each GPU is read (at least "+minSamplerInterval.String()+").", "1s", &o.interval)
	cliflag.Duration(app, "sampler.device-timeout", "How long one GPU's read may take before the GPU is reported down (gpulens_gpu_up 0) and the call in progress is counted as deadline_exceeded.", "5s", &o.deviceTimeout)
	o.sim = simflag.Add(app, "Replace NVML with a simulated fleet")
	o.sim.AddSpeed(app)
	for _, f := range collector.Factories() {
		o.collectors[f.Name] = app.Flag("collector."+f.Name, "Enable the "+f.Name+" collector: "+f.Help).Default(fmt.Sprint(f.DefaultEnabled)).Bool()
	}
	o.xid = app.Flag("collector."+collector.XIDFactoryName, "Enable the xid collector: XID error events from the driver.").Default("true").Bool()
	addAttributionFlags(app, &o.attribution)
	addProbeFlags(app, &o.probe)
	addCostFlags(app, &o.cost)
	addCompatFlags(app, &o.compat)
	o.web = kingpinflag.AddFlags(app, ":9842")
	flag.AddFlags(app, o.log)
	app.Version(version.Print("gpulens-exporter"))
	app.HelpFlag.Short('h')
	return app, o
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}

// run is main without the process exit, so tests can drive it.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == gpuprobe.ChildCommand {
		// A probe child this program started for a MIG instance (child.go).
		return simflag.RunProbeChild(ctx, "gpulens-exporter", args[1:], os.Stdin, os.Stdout, stderr)
	}
	o, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gpulens-exporter: error: %v\n", err)
		return 2
	}
	logger := promslog.New(o.log)
	if err := serve(ctx, o, logger); err != nil {
		logger.Error("exiting", "err", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, o *options, logger *slog.Logger) error {
	logger.Info("starting gpulens-exporter", "version", version.Info(), "build_context", version.BuildContext())
	// The real or the simulated GPUs, host and prices: chosen there only.
	src, err := openSources(ctx, o, logger)
	if err != nil {
		return err
	}
	defer src.close()

	var enabled []collector.NamedCollector
	for _, f := range collector.Factories() {
		if *o.collectors[f.Name] {
			enabled = append(enabled, collector.NamedCollector{Name: f.Name, Collector: f.New()})
		}
	}
	if src := priceSource(o.cost, src.prices, logger); src != nil {
		enabled = append(enabled, collector.NamedCollector{Name: collector.CostCollectorName, Collector: collector.NewCostCollector(src)})
	}
	names := make([]string, 0, len(enabled)+1)
	for _, c := range enabled {
		names = append(names, c.Name)
	}
	if *o.xid {
		names = append(names, collector.XIDFactoryName)
	}
	logger.Info("enabled collectors", "collectors", joinNames(names))

	sampler, err := collector.NewSampler(src.nvml, enabled, *o.xid, collector.Config{
		Interval: o.interval, DeviceTimeout: o.deviceTimeout, Simulated: src.simulated, Logger: logger,
		Processes: src.processes,
	})
	if err != nil {
		return err
	}
	logger.Info("GPUs found", "count", sampler.DeviceCount())

	reg := collector.NewRegistry() // collected with the snapshot on the render's goroutine
	reg.MustRegister(
		sampler.Live(),
		versioncollector.NewCollector("gpulens_exporter"),
		collectors.NewGoCollector(),
		collector.NewProcessCollector(), // client_golang's, without its per-scrape /proc/stat and netstat reads
		// gpulens_host_*: the host's pressure (PSI) and CPU count.
		collector.NewHostCollector(src.host),
	)
	// The probe runs on its own goroutine and publishes a snapshot that the
	// exposition renders with the rest; a scrape never calls CUDA.
	var probe *collector.ProbeCollector
	if o.probe.enabled {
		if probe, err = newProbe(o.probe, o.probeConfig, src.prober, src.probeChildArgs, sampler, logger); err != nil {
			return err
		}
		reg.MustRegister(probe)
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Stop the goroutines before waiting for them, so that an error (a
	// listen error above all) returns at once.
	defer func() { cancel(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); sampler.Run(ctx) }()
	if probe != nil {
		wg.Add(1)
		go func() { defer wg.Done(); probe.Run(ctx) }()
	}
	// The snapshot and the exporter's own metrics are rendered when a scrape
	// finds a new snapshot, once however many scrapes want it; other
	// scrapes write the rendered bytes.
	metrics := collector.NewExposition(sampler, reg, collector.ExpositionOptions{MaxRequestsInFlight: o.maxRequests, Logger: logger})

	mux, err := newMux(metrics, o, logger)
	if err != nil {
		return err
	}
	// The DCGM-compatible view (--compat.dcgm), converted only when scraped.
	dcgm, err := startCompat(ctx, o.compat, sampler, o.maxRequests, *o.web.WebConfigFile, &wg, logger)
	if err != nil {
		return err
	}
	if dcgm != nil {
		mux.Handle(dcgmPath, dcgm)
	}
	srv := newHTTPServer(mux, logger)
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := web.ListenAndServe(srv, o.web, logger); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP on %s: %w", listenSource(o.web), err)
	}
	logger.Info("shutting down")
	return nil
}

// The HTTP server's timeouts; variables so that tests can shorten them.
var (
	// readHeaderTimeout bounds reading a request's header.
	readHeaderTimeout = 10 * time.Second
	// readTimeout bounds reading a whole request, body included: a client
	// that promises a body and never sends it is disconnected.
	readTimeout = 30 * time.Second
	// writeTimeout bounds a request from the end of its header to the end
	// of its response: a client that stops reading is disconnected.
	writeTimeout = 30 * time.Second
	// idleTimeout closes a keep-alive connection that carries no request
	// for this long (longer than the usual scrape intervals, so Prometheus
	// keeps its connection).
	idleTimeout = 90 * time.Second
)

// newHTTPServer returns the exporter's HTTP server: no connection, idle or
// stalled, is held for ever.
func newHTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// listenSource names the flag that chose where to listen, for errors.
func listenSource(w *web.FlagConfig) string {
	if w.WebSystemdSocket != nil && *w.WebSystemdSocket {
		return "--web.systemd-socket"
	}
	if w.WebListenAddresses == nil {
		return "--web.listen-address"
	}
	return "--web.listen-address=" + strings.Join(*w.WebListenAddresses, ",")
}

func newMux(metrics http.Handler, o *options, logger *slog.Logger) (*http.ServeMux, error) {
	mux := http.NewServeMux()
	mux.Handle(o.metricsPath, metrics)
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "Healthy\n")
	})
	if o.metricsPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "gpulens exporter",
			Description: "NVIDIA GPU metrics: devices, processes, MIG instances and contention, sampled in the background.",
			Version:     version.Info(),
			Links: []web.LandingLinks{
				{Address: o.metricsPath, Text: "Metrics"},
				{Address: "/-/healthy", Text: "Health"},
			},
		})
		if err != nil {
			return nil, fmt.Errorf("building landing page: %w", err)
		}
		mux.Handle("/", landing)
	}
	return mux, nil
}

// ---- cost (--cost.*, docs/cost.md) ----

// costFlags price this node's GPUs: gpulens_gpu_price_usd_per_hour and
// gpulens_mig_price_usd_per_hour.
type costFlags struct {
	hourly    float64
	hourlySet bool
	file      string
	node      string
	labels    []string
	resolver  *pricing.Resolver // set by validate; nil: no price flag
}

func addCostFlags(app *kingpin.Application, f *costFlags) {
	cliflag.Price(app, "cost.gpu-hourly-usd", "Price of one GPU-hour on this node in USD, for the GPUs --cost.price-file does not price (every GPU without a file). Exposed as gpulens_gpu_price_usd_per_hour for the chargeback rules; without a price flag, only a simulated scenario's prices are.", "", &f.hourly).PlaceHolder("USD").IsSetByUser(&f.hourlySet)
	app.Flag("cost.price-file", "Price file (YAML): USD per GPU-hour by GPU model name or pattern, with overrides for nodes and node labels (docs/cost.md#price-file).").PlaceHolder("FILE").StringVar(&f.file)
	app.Flag("cost.node", "This node's name, for the price file's node overrides (default: the host name).").Envar("NODE_NAME").StringVar(&f.node)
	app.Flag("cost.label", "A label of this node for the price file's label overrides, as name=value (provider=cloud-b); repeatable.").PlaceHolder("NAME=VALUE").StringsVar(&f.labels)
}

// validate checks the cost flags and loads the price file, so that a bad
// price stops the exporter before it starts.
func (f *costFlags) validate() error {
	labels, err := pricing.ParseLabels(f.labels)
	if err != nil {
		return fmt.Errorf("--cost.label: %w", err)
	}
	if !f.hourlySet && f.file == "" {
		if len(labels) > 0 {
			return errors.New("--cost.label is for the overrides of --cost.price-file, which is not given")
		}
		return nil
	}
	var fallback *float64
	if f.hourlySet { // checked by cliflag.Price
		fallback = &f.hourly
	}
	var table *pricing.Table
	if f.file != "" {
		if table, err = pricing.Load(f.file); err != nil {
			return fmt.Errorf("--cost.price-file: %w", err)
		}
	}
	if f.node == "" {
		f.node, _ = os.Hostname()
	}
	f.resolver, err = pricing.NewResolver(table, pricing.Node{Name: f.node, Labels: labels}, fallback)
	return err
}

// priceSource prices the GPUs from the cost flags, else from the sources'
// own prices (a simulated scenario's); nil: no price, no cost collector.
func priceSource(f costFlags, own collector.PriceSource, logger *slog.Logger) collector.PriceSource {
	switch {
	case f.resolver != nil:
		return collector.PriceFunc(func(d collector.Device) (float64, bool) {
			p, ok := f.resolver.Price(d.Name)
			if !ok {
				logger.Warn("GPU has no price: no model entry of the price file matches it and --cost.gpu-hourly-usd is not given", "gpu", d.Index, "name", d.Name, "node", f.node)
				return 0, false
			}
			from := p.From
			if from == pricing.FromFallback {
				from = "--cost.gpu-hourly-usd"
			}
			logger.Info("GPU priced", "gpu", d.Index, "name", d.Name, "usd_per_hour", p.USDPerHour, "from", from)
			return p.USDPerHour, true
		})
	case own != nil:
		logger.Info("simulated GPUs priced from the scenario's price_usd_per_hour (no --cost.* flag given)")
		return own
	}
	return nil
}
