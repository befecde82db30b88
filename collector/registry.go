package collector

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Registry is a prometheus.Registry that remembers its collectors, so that
// an Exposition serving it collects them on the render's goroutine and
// writes them as it writes the snapshot: a prometheus.Registry collects
// each collector on a goroutine of its own, checks and hashes every metric
// and sorts the families, which costs more than the collecting. Its Gather
// (and so a protobuf scrape) is the prometheus.Registry's.
type Registry struct {
	*prometheus.Registry
	mu         sync.Mutex
	collectors []prometheus.Collector
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{Registry: prometheus.NewRegistry()} }

// Register implements prometheus.Registerer.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return nil
}

// MustRegister implements prometheus.Registerer.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister implements prometheus.Registerer.
func (r *Registry) Unregister(c prometheus.Collector) bool {
	if !r.Registry.Unregister(c) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rc := range r.collectors {
		if rc == c {
			r.collectors = slices.Delete(r.collectors, i, i+1)
			break
		}
	}
	return true
}

// collect appends every collector's metrics to ms. The collectors run one
// after the other on one goroutine, while this one receives.
func (r *Registry) collect(ms []prometheus.Metric) []prometheus.Metric {
	r.mu.Lock()
	cs := slices.Clone(r.collectors)
	r.mu.Unlock()
	ch := make(chan prometheus.Metric, 256)
	go func() {
		defer close(ch)
		for _, c := range cs {
			c.Collect(ch)
		}
	}()
	for m := range ch {
		ms = append(ms, m)
	}
	return ms
}
