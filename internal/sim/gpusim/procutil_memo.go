package gpusim

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// periodMemo keeps the samples of the periods GetProcessUtilization has
// computed, so that a read computes only the periods no earlier read did.
// Every input of a period's samples is a function of sim time (the
// scenario's tenants and neighbour) except the probe's kernel spans, which
// the simulated driver may record after NVML first computed their periods
// (reportedUntil); a recorded span forgets the periods it overlaps, so a
// read gives exactly what computing every period again would.
//
// Without it, a read of a quiet GPU (no sample, ERROR_NOT_FOUND: the
// reader's lastSeen never moves) computed every period of the buffer: at
// --sim.speed=40, where the buffer holds 10 s of wall time (2,400 periods),
// the 64-GPU fleet's exporter took 75 % of a core.
type periodMemo struct {
	mu    sync.Mutex
	first int64                             // period index of periods[0]
	done  []bool                            // periods[i] computed and current
	per   [][]nvml.ProcessUtilizationSample // samples of period first+i
}

// samples appends the samples of periods first..last newer than lastSeen,
// computing those not memoised with compute, and forgets periods before
// first.
func (m *periodMemo) samples(first, last int64, lastSeen uint64, ts func(k int64) uint64,
	compute func(k int64, out []nvml.ProcessUtilizationSample) []nvml.ProcessUtilizationSample,
	out []nvml.ProcessUtilizationSample) []nvml.ProcessUtilizationSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.per) == 0 || first < m.first || first >= m.first+int64(len(m.per)) {
		m.first, m.done, m.per = first, m.done[:0], m.per[:0]
	} else if drop := int(first - m.first); drop > 0 {
		m.done = append(m.done[:0], m.done[drop:]...)
		m.per = append(m.per[:0], m.per[drop:]...)
		m.first = first
	}
	for k := first; k <= last; k++ {
		if ts(k) <= lastSeen {
			continue
		}
		i := int(k - m.first)
		for len(m.per) <= i {
			m.per = append(m.per, nil)
			m.done = append(m.done, false)
		}
		if !m.done[i] {
			m.per[i] = compute(k, m.per[i][:0])
			m.done[i] = true
		}
		out = append(out, m.per[i]...)
	}
	return out
}

// forget drops the memoised periods from index a to b (a recorded kernel
// span overlaps them).
func (m *periodMemo) forget(a, b int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := max(a, m.first); k <= b && k < m.first+int64(len(m.done)); k++ {
		m.done[k-m.first] = false
	}
}
