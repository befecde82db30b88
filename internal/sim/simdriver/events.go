package simdriver

import (
	"fmt"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

type event struct {
	flags    uint32 // CUevent_flags it was created with
	recorded bool
	at       time.Time
}

// EventCreate creates an event with flags (gpuprobe.Event*): a wait on it
// blocks the thread with gpuprobe.EventBlockingSync, else spins (SpinTime).
func (d *Driver) EventCreate(flags uint32) (gpuprobe.Event, error) {
	err := d.enter(CallEventCreate)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	c, err := d.ctx(CallEventCreate)
	if err != nil {
		return 0, err
	}
	if flags&^(gpuprobe.EventBlockingSync|gpuprobe.EventDisableTiming) != 0 {
		return 0, cudaError(CallEventCreate, errInvalidValue, fmt.Sprintf("event flags %#x", flags))
	}
	e := gpuprobe.Event(d.nextHandle())
	c.events[e] = &event{flags: flags}
	return e, nil
}

func (d *Driver) event(call string, e gpuprobe.Event) (*event, error) {
	c, err := d.ctx(call)
	if err != nil {
		return nil, err
	}
	ev := c.events[e]
	if ev == nil {
		return nil, cudaError(call, errInvalidHandle, "")
	}
	return ev, nil
}

// EventRecord stamps the event with the time the stream reaches it: now,
// or when the work queued before it ends.
func (d *Driver) EventRecord(e gpuprobe.Event) error {
	err := d.enter(CallEventRecord)
	defer d.leave()
	if err != nil {
		return err
	}
	ev, err := d.event(CallEventRecord, e)
	if err != nil {
		return err
	}
	if d.clock(); d.stream.Before(d.vt) {
		d.stream = d.vt
	}
	ev.recorded, ev.at = true, d.stream
	return nil
}

// EventSynchronize waits until the stream has reached the event. As the
// CUDA driver API documents, the thread blocks only on an event created
// with CU_EVENT_BLOCKING_SYNC; on any other it busy-waits, whatever the
// context's scheduling flag: the wait is added to SpinTime.
func (d *Driver) EventSynchronize(e gpuprobe.Event) error {
	err := d.enter(CallEventSynchronize)
	defer d.leave()
	if err != nil {
		return err
	}
	ev, err := d.event(CallEventSynchronize, e)
	if err != nil {
		return err
	}
	if d.clock(); ev.recorded && ev.at.After(d.vt) {
		if ev.flags&gpuprobe.EventBlockingSync == 0 {
			d.spin += ev.at.Sub(d.vt)
		}
		d.vt = ev.at
	}
	return nil
}

// SpinTime is the host CPU time the driver's callers have spent
// busy-waiting: cuEventSynchronize on events without
// CU_EVENT_BLOCKING_SYNC, for as long as the event took to complete
// (virtual time; one core each). Waits that block (blocking events,
// cuCtxSynchronize and synchronous copies in the probe's
// CU_CTX_SCHED_BLOCKING_SYNC context) cost none.
func (d *Driver) SpinTime() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.spin
}

func (d *Driver) EventElapsed(start, end gpuprobe.Event) (time.Duration, error) {
	err := d.enter(CallEventElapsedTime)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	s, err := d.event(CallEventElapsedTime, start)
	if err != nil {
		return 0, err
	}
	e, err := d.event(CallEventElapsedTime, end)
	if err != nil {
		return 0, err
	}
	now := d.clock()
	if !s.recorded || !e.recorded {
		return 0, cudaError(CallEventElapsedTime, errInvalidHandle, "event not recorded")
	}
	if (s.flags|e.flags)&gpuprobe.EventDisableTiming != 0 {
		return 0, cudaError(CallEventElapsedTime, errInvalidHandle, "event created with CU_EVENT_DISABLE_TIMING")
	}
	if s.at.After(now) || e.at.After(now) {
		return 0, cudaError(CallEventElapsedTime, errNotReady, "")
	}
	return e.at.Sub(s.at), nil
}

func (d *Driver) EventDestroy(e gpuprobe.Event) error {
	err := d.enter(CallEventDestroy)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallEventDestroy)
	if err != nil {
		return err
	}
	if c.events[e] == nil {
		return cudaError(CallEventDestroy, errInvalidHandle, "")
	}
	delete(c.events, e)
	return nil
}
