package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot is one immutable view of every GPU.
type Snapshot struct {
	Time    time.Time
	Metrics []prometheus.Metric
	seq     uint64 // 1 for the first snapshot, increasing with every publish
	// sampled: every GPU's worker had finished a cycle (its first reading,
	// successful or not) when the snapshot was taken.
	sampled bool
}

// Snapshot returns the latest published snapshot.
func (s *Sampler) Snapshot() *Snapshot { return s.snap.Load() }

// publish assembles a new snapshot from every GPU's latest result. It runs
// after each GPU cycle and on the watchdog tick.
func (s *Sampler) publish() {
	s.publishMu.Lock()
	defer s.publishMu.Unlock()
	now := s.now()
	ms := make([]prometheus.Metric, 0, s.lastSize)
	ok := make([]bool, len(s.collectors))
	dur := make([]time.Duration, len(s.collectors))
	for i := range ok {
		ok[i] = true
	}
	sampled := true
	for _, w := range s.workers {
		res := w.result.Load()
		sampled = sampled && res != nil
		var uuid string
		if u := w.uuid.Load(); u != nil {
			uuid = *u
		}
		up := res != nil && res.up
		if res != nil {
			if now.Sub(res.completed) > s.cfg.DeviceTimeout+s.cfg.Interval {
				up = false // the GPU's goroutine has not finished a cycle for too long
			}
			if up {
				for i := range ok {
					ok[i] = ok[i] && res.collectorOK[i]
					dur[i] = max(dur[i], res.collectorD[i])
				}
			}
		}
		if startNs := w.cycleStart.Load(); startNs != 0 {
			if running := now.Sub(time.Unix(0, startNs)); running > s.cfg.DeviceTimeout {
				up = false
				if ci := w.currentCollector.Load(); ci >= 0 {
					ok[ci] = false
					dur[ci] = max(dur[ci], running)
				}
				if w.hangReported != startNs {
					w.hangReported = startNs
					call := "unknown"
					if c := w.current.Load(); c != nil {
						call = *c
					}
					s.RecordError(call, errDeadline)
					s.logger.Warn("NVML call exceeded the device deadline", "gpu", w.index, "call", call, "deadline", s.cfg.DeviceTimeout)
				}
			}
		}
		ms = append(ms, prometheus.MustNewConstMetric(gpuUpDesc, prometheus.GaugeValue, b2f(up), w.gpu, uuid))
		if res != nil && !res.lastSuccess.IsZero() {
			ms = append(ms, prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue,
				float64(res.lastSuccess.UnixNano())/1e9, w.gpu, uuid))
		}
		if up {
			ms = append(ms, res.metrics...)
		}
	}
	for i, c := range s.collectors {
		ms = append(ms,
			prometheus.MustNewConstMetric(collectorSuccessDesc, prometheus.GaugeValue, b2f(ok[i]), c.Name),
			prometheus.MustNewConstMetric(collectorDurationDesc, prometheus.GaugeValue, dur[i].Seconds(), c.Name))
	}
	s.lastSize = len(ms)
	s.published++
	s.snap.Store(&Snapshot{Time: now, Metrics: ms, seq: s.published, sampled: sampled})
}
