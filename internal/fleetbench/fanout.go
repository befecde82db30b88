package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fanout serves many simulated nodes from a few real exporters: node i's
// /node/i/metrics is the latest exposition of template i mod len(templates),
// in the format the scraper asked for. The exposition of each (template,
// Accept header) is fetched from the exporter at most once per refresh and
// its bytes served to every node that maps to it, so one process serves
// thousands of targets with the real exporter's series for the cost of a
// few scrapes per refresh. Nodes differ by the target's instance label (the
// exposition carries no host name), as real nodes do.
type fanout struct {
	templates []string // exporter base URLs, http://host:port
	nodes     int
	refresh   time.Duration
	client    *http.Client
	now       func() time.Time

	mu    sync.Mutex
	cache map[cacheKey]*cached
}

type cacheKey struct {
	template int
	accept   string
}

// cached is one exposition; mu serialises its refresh, so concurrent
// scrapes of nodes of one template wait for one fetch instead of each
// making their own.
type cached struct {
	mu          sync.Mutex
	at          time.Time
	body        []byte
	contentType string
}

func newFanout(templates []string, nodes int, refresh time.Duration) *fanout {
	return &fanout{
		templates: templates, nodes: nodes, refresh: refresh,
		client: &http.Client{Timeout: 10 * time.Second},
		now:    time.Now,
		cache:  map[cacheKey]*cached{},
	}
}

// nodePath is node i's metrics path.
func nodePath(i int) string { return fmt.Sprintf("/node/%d/metrics", i) }

// parseNode returns the node of a /node/N/metrics path.
func parseNode(path string, nodes int) (int, error) {
	rest, ok := strings.CutPrefix(path, "/node/")
	if !ok {
		return 0, fmt.Errorf("path %q is not /node/N/metrics", path)
	}
	num, ok := strings.CutSuffix(rest, "/metrics")
	if !ok {
		return 0, fmt.Errorf("path %q is not /node/N/metrics", path)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= nodes {
		return 0, fmt.Errorf("path %q: node %q is not in 0..%d", path, num, nodes-1)
	}
	return n, nil
}

func (f *fanout) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, err := parseNode(r.URL.Path, f.nodes)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	body, ct, err := f.exposition(r.Context(), n%len(f.templates), r.Header.Get("Accept"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// exposition returns template t's exposition for accept, fetched again
// when the cached one is older than the refresh.
func (f *fanout) exposition(ctx context.Context, t int, accept string) ([]byte, string, error) {
	f.mu.Lock()
	c := f.cache[cacheKey{t, accept}]
	if c == nil {
		c = &cached{}
		f.cache[cacheKey{t, accept}] = c
	}
	f.mu.Unlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.body != nil && f.now().Sub(c.at) < f.refresh {
		return c.body, c.contentType, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.templates[t]+"/metrics", nil)
	if err != nil {
		return nil, "", err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("template exporter %d: %w", t, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("template exporter %d: reading: %w", t, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("template exporter %d: %s", t, resp.Status)
	}
	c.body, c.contentType, c.at = body, resp.Header.Get("Content-Type"), f.now()
	return c.body, c.contentType, nil
}
