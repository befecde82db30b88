package gpuprobe

import (
	"context"
	"sync"
)

// PerDevice is a Prober whose probes of different devices may run at the
// same time: one Probe per device ordinal, each with its own locked OS
// thread and its own context, as CUDA allows (the driver API is thread-safe
// and a context is current on one thread). Probes of one device are still
// one at a time, and a call abandoned past its deadline makes only that
// device's later probes answer ErrBusy. The exporter's
// --collector.probe.schedule=together uses it to probe every GPU of a node
// in one window.
type PerDevice struct {
	list   *Probe
	driver func(ordinal int) Driver
	opts   Options

	mu     sync.Mutex
	probes map[int]*Probe
}

var _ Prober = (*PerDevice)(nil)

// NewPerDevice returns a PerDevice that lists devices through list and
// probes device ordinal through driver(ordinal): the same Driver for every
// ordinal over libcuda (one process, one driver), or a driver of its own
// per device where a Driver cannot hold contexts on several threads at
// once (the simulated driver keeps one current context).
func NewPerDevice(list Driver, driver func(ordinal int) Driver, opts Options) *PerDevice {
	return &PerDevice{list: New(list, opts), driver: driver, opts: opts, probes: map[int]*Probe{}}
}

// Devices lists the CUDA-visible devices.
func (m *PerDevice) Devices(ctx context.Context) ([]DeviceInfo, error) { return m.list.Devices(ctx) }

// Probe measures one device on that device's own Probe.
func (m *PerDevice) Probe(ctx context.Context, ordinal int, cfg Config) (Result, error) {
	return m.probe(ordinal).Probe(ctx, ordinal, cfg)
}

func (m *PerDevice) probe(ordinal int) *Probe {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.probes[ordinal]
	if p == nil {
		p = New(m.driver(ordinal), m.opts)
		m.probes[ordinal] = p
	}
	return p
}

// Wait blocks until the driver work in progress on every device (stuck
// calls included) has ended, or ctx ends.
func (m *PerDevice) Wait(ctx context.Context) error {
	m.mu.Lock()
	all := []*Probe{m.list}
	for _, p := range m.probes {
		all = append(all, p)
	}
	m.mu.Unlock()
	for _, p := range all {
		if err := p.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}
