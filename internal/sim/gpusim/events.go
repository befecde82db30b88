package gpusim

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

const (
	xidGpuLost = 79
	// maxQueued bounds an event set's queue; older events are dropped, as the
	// driver drops events nobody waits for.
	maxQueued = 1024
	// maxPoll bounds one sleep of Wait so that a test clock moved by another
	// goroutine is noticed.
	maxPoll = 100 * time.Millisecond
)

// xidEvent is one scheduled XID on a device at sim time t.
type xidEvent struct {
	t    float64
	code uint64
	dev  *device
}

// xidsIn appends the device's XIDs in (a, b], in time order. No event follows
// the loss of the GPU, which itself emits XID 79.
func (d *device) xidsIn(a, b float64, out []xidEvent) []xidEvent {
	if b <= a {
		return out
	}
	end := math.Min(b, d.lostAt)
	start := len(out)
	keep := func(t float64) bool { return t > a && t <= end && t < d.lostAt }
	for _, fs := range d.xidFaults {
		if fs.every == 0 {
			if keep(fs.at) {
				out = append(out, xidEvent{fs.at, fs.xid, d})
			}
			continue
		}
		k := math.Max(0, math.Floor((a-fs.at)/fs.every)+1)
		for n := 0; n < maxQueued; n++ {
			t := fs.at + k*fs.every
			if t > end {
				break
			}
			if keep(t) {
				out = append(out, xidEvent{t, fs.xid, d})
			}
			k++
		}
	}
	if codes := d.spec.xidCodes; len(codes) > 0 {
		d.randomXids.events(a, end, func(t float64, h int64, i int) {
			if keep(t) {
				c := codes[hashN(d.key, streamXidCode, uint64(h), uint64(i))%uint64(len(codes))]
				out = append(out, xidEvent{t, c, d})
			}
		})
	}
	if d.lostAt > a && d.lostAt <= b {
		out = append(out, xidEvent{d.lostAt, xidGpuLost, d})
	}
	sort.SliceStable(out[start:], func(i, j int) bool { return out[start+i].t < out[start+j].t })
	return out
}

// nextXidAfter is the time of the device's first XID after a, looking at most
// horizon seconds ahead; +Inf if none.
func (d *device) nextXidAfter(a, horizon float64) float64 {
	next := math.Inf(1)
	if d.lostAt > a {
		next = d.lostAt
	} else {
		return next
	}
	for _, fs := range d.xidFaults {
		t := fs.at
		if fs.every > 0 && t <= a {
			t = fs.at + (math.Floor((a-fs.at)/fs.every)+1)*fs.every
		}
		if t > a && t < next {
			next = t
		}
	}
	if len(d.spec.xidCodes) > 0 {
		if t := d.randomXids.next(a, horizon); t < next {
			next = t
		}
	}
	return next
}

// eventSet is the simulation's nvml.EventSet. Wait blocks in real time and
// delivers each due XID of the registered devices, one per call.
type eventSet struct {
	mock.EventSet // methods beyond Wait and Free panic, like the mock

	f *Fleet

	mu     sync.Mutex
	regs   map[*device]*registration
	order  []*device // registration order, for deterministic collection
	queue  []nvml.EventData
	freed  bool
	freeCh chan struct{}
}

type registration struct {
	mask   uint64
	cursor float64 // events up to this sim time have been collected
}

func newEventSet(f *Fleet) *eventSet {
	return &eventSet{f: f, regs: map[*device]*registration{}, freeCh: make(chan struct{})}
}

func (s *eventSet) register(d *device, types uint64) nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return nvml.ERROR_UNINITIALIZED
	}
	if r, ok := s.regs[d]; ok {
		r.mask |= types
		return nvml.SUCCESS
	}
	s.regs[d] = &registration{mask: types, cursor: s.f.elapsed()}
	s.order = append(s.order, d)
	return nvml.SUCCESS
}

// collect moves the events due by sim time now into the queue. Callers hold mu.
func (s *eventSet) collect(now float64) {
	var batch []xidEvent
	for _, d := range s.order {
		r := s.regs[d]
		if now <= r.cursor {
			continue
		}
		if r.mask&nvml.EventTypeXidCriticalError != 0 {
			batch = d.xidsIn(r.cursor, now, batch)
		}
		r.cursor = now
	}
	sort.SliceStable(batch, func(i, j int) bool { return batch[i].t < batch[j].t })
	for _, e := range batch {
		s.queue = append(s.queue, nvml.EventData{
			Device:            e.dev,
			EventType:         nvml.EventTypeXidCriticalError,
			EventData:         e.code,
			GpuInstanceId:     0xFFFFFFFF,
			ComputeInstanceId: 0xFFFFFFFF,
		})
	}
	if over := len(s.queue) - maxQueued; over > 0 {
		s.queue = append(s.queue[:0], s.queue[over:]...)
	}
}

// nextDue is the sim time of the next event after now over the registered
// devices, or +Inf. Callers hold mu.
func (s *eventSet) nextDue(now, horizon float64) float64 {
	next := math.Inf(1)
	for _, d := range s.order {
		if s.regs[d].mask&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if t := d.nextXidAfter(now, horizon); t < next {
			next = t
		}
	}
	return next
}

// Wait returns the next due event, blocking up to timeoutMs of real time.
func (s *eventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	for {
		s.mu.Lock()
		if s.freed {
			s.mu.Unlock()
			return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
		}
		now := s.f.elapsed()
		s.collect(now)
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return ev, nvml.SUCCESS
		}
		remaining := time.Until(deadline)
		next := s.nextDue(now, remaining.Seconds()+1)
		s.mu.Unlock()
		if remaining <= 0 {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		sleep := min(remaining, maxPoll)
		if !math.IsInf(next, 1) {
			// Wake when the clock should reach the event, at least 1 ms on.
			until := s.f.realDuration(time.Duration((next-now)*float64(time.Second))) + time.Millisecond
			sleep = min(sleep, until)
		}
		timer := time.NewTimer(sleep)
		select {
		case <-timer.C:
		case <-s.freeCh:
			timer.Stop()
			return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
		}
	}
}

// Free releases the set; a blocked Wait returns ERROR_UNINITIALIZED.
func (s *eventSet) Free() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return nvml.ERROR_UNINITIALIZED
	}
	s.freed = true
	close(s.freeCh)
	return nvml.SUCCESS
}
