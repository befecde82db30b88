package simdriver

import (
	"time"
)

// clock brings the virtual clock up to the base clock less lag (as it was
// when the call in progress entered) and returns it.
func (d *Driver) clock() time.Time {
	n := d.callBase
	if !d.inCall {
		n = d.now().Add(-d.lag)
	}
	if n.After(d.vt) {
		d.vt = n
	}
	return d.vt
}

// sync makes the host wait for the stream.
func (d *Driver) sync() {
	if d.clock(); d.stream.After(d.vt) {
		d.vt = d.stream
	}
}

// blocking runs a host-synchronous operation (a copy, a memset) of dur
// after the queued work.
func (d *Driver) blocking(dur time.Duration) {
	d.sync()
	d.vt = d.vt.Add(max(0, dur))
	d.stream = d.vt
}

// enqueue queues a kernel launched now on dev: the host pays a quarter of
// the launch latency, the kernel starts a launch latency from now or after
// the queued work, and runs for run(start); dev's Kernel hears of the run.
func (d *Driver) enqueue(dev *Device, latency time.Duration, run func(start time.Time) time.Time) {
	now := d.clock()
	start := now.Add(latency)
	if d.stream.After(start) {
		start = d.stream
	}
	d.stream = run(start)
	d.vt = now.Add(latency / 4)
	if dev.Kernel != nil && d.stream.After(start) {
		dev.Kernel(start, d.stream)
	}
}

// jittered scales a duration by 1±jitter/2.
func (d *Driver) jittered(dur time.Duration) time.Duration {
	return time.Duration(float64(dur) * (1 + jitter*(d.rng.Float64()-0.5)))
}

// Now is the virtual clock.
func (d *Driver) Now() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.clock()
}

func (d *Driver) slowdown(dev *Device, t time.Time) float64 {
	if dev.Slowdown == nil {
		return 1
	}
	s := dev.Slowdown(t)
	if s <= 0 || s > 1 {
		if s > 1 {
			return 1
		}
		return 1e-3
	}
	return s
}

func neighbour(dev *Device, t time.Time) (float64, time.Duration) {
	if dev.Neighbour == nil {
		return 0, 0
	}
	share, slice := dev.Neighbour(t)
	if share <= 0 || slice <= 0 {
		return 0, 0
	}
	return min(share, 0.99), slice
}

// transfer is how long bytes take at rate bytes/s on dev now (Slowdown
// applied, no neighbour).
func (d *Driver) transfer(dev *Device, bytes uint64, rate float64) time.Duration {
	rate *= d.slowdown(dev, d.clock())
	return d.jittered(time.Duration(float64(bytes) / rate * 1e9))
}
