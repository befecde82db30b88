package observe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// Defaults of Config.
const (
	DefaultInterval = time.Second
	DefaultTimeout  = 5 * time.Second
	// MinInterval is the shortest interval accepted.
	MinInterval = 100 * time.Millisecond
)

// Config configures a Scraper.
type Config struct {
	// URL is the server's metrics URL, e.g. http://host:8000/metrics
	// (DefaultURL derives it from the API's base URL).
	URL string
	// Interval between scrapes (0: DefaultInterval; at least MinInterval).
	Interval time.Duration
	// Timeout bounds one scrape (0: DefaultTimeout, or the interval when
	// shorter).
	Timeout time.Duration
	// Client sends the scrapes (nil: a client of its own). No credentials
	// are sent: servers serve /metrics without the API key.
	Client *http.Client
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Validate fills the defaults and checks the configuration; errors name
// the options.
func (c *Config) Validate() error {
	if _, err := option.Check(c.URL); err != nil {
		return option.Errorf("%s %q: must be an http:// or https:// URL: %v", option.Name("ServerMetricsURL"), c.URL, err)
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Interval < MinInterval {
		return option.Errorf("%s must be at least %v, got %v", option.Name("ServerMetricsInterval"), MinInterval, c.Interval)
	}
	if c.Timeout <= 0 {
		c.Timeout = min(DefaultTimeout, c.Interval)
	}
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// DefaultURL is the metrics URL of the server whose OpenAI-compatible API
// is at base: base without a trailing "/v1", then "/metrics" (vLLM,
// SGLang and TGI serve both on one port).
func DefaultURL(base string) string {
	b := strings.TrimRight(base, "/")
	b = strings.TrimSuffix(b, "/v1")
	return b + "/metrics"
}

// Redact drops any user:password from a URL, for the report.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// Scraper scrapes one server during one run.
type Scraper struct {
	cfg    Config
	parent context.Context // ends the scraping early (the run was interrupted)
	stop   chan struct{}
	done   chan struct{}

	mu  sync.Mutex
	rec *Recorder
}

// Start validates cfg, scrapes once before it returns (the baseline of
// the counters, before the run sends anything; at most the timeout), then
// every interval until Stop or until ctx ends. It returns an error only
// for a bad configuration.
func Start(ctx context.Context, cfg Config) (*Scraper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scraper{cfg: cfg, parent: ctx, stop: make(chan struct{}), done: make(chan struct{}), rec: NewRecorder()}
	s.scrape(ctx)
	go s.loop()
	return s, nil
}

func (s *Scraper) loop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.parent.Done():
			return
		case <-s.stop:
			return
		case <-t.C:
		}
		s.scrape(s.parent)
	}
}

// scrape scrapes once into the recorder, within the timeout; a scrape cut
// short because ctx ended is not counted.
func (s *Scraper) scrape(ctx context.Context) {
	at := s.cfg.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := s.get(ctx, at)
	if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
		s.mu.Lock()
		s.rec.Fail(err)
		s.mu.Unlock()
	}
}

func (s *Scraper) get(ctx context.Context, at time.Time) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the report already
		}
		return fmt.Errorf("GET %s: %w", Redact(s.cfg.URL), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", Redact(s.cfg.URL), resp.StatusCode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.rec.Add(at, resp.Body) // Add counts a scrape it cannot parse
	return nil
}

// Stop stops the scraping, after the scrape in progress if any, scrapes a
// last time (so that counters cover the whole run, also when the run was
// interrupted) and returns the summary, its timeline counted from
// runStart.
func (s *Scraper) Stop(runStart time.Time) *report.ServerMetrics {
	close(s.stop)
	<-s.done
	s.scrape(context.WithoutCancel(s.parent))
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.Summary(Redact(s.cfg.URL), runStart)
}
