package collector

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// deviceState is created once per GPU by the sampler and handed to every
// collector of that GPU through Device. It takes the readings that several
// collectors need once per cycle, whichever collector asks first, and keeps
// what must survive between cycles: GetProcessUtilization's lastSeen
// timestamp (a second call in the same cycle would return nothing), the
// procfs cache, MIG instance identities and the GPM samples. Everything runs
// on the GPU's sampler goroutine: no locking.
type deviceState struct {
	lib      nvml.Interface
	interval time.Duration
	opts     ProcessOptions

	cycle uint64 // incremented at the start of every cycle

	procs     processTracker
	procsAt   uint64 // cycle of procsRead
	procsRead *processReading
	usage     *usageReader // the processes' CPU, memory and I/O

	mig     migTracker
	migAt   uint64
	migRead *migReading

	gpm     gpmTracker
	gpmAt   uint64
	gpmRead *gpmReading
	// gpmEnabled: the gpm collector is on, so other collectors may take
	// GPM readings (--no-collector.gpm keeps GPM entirely off).
	gpmEnabled bool
}

func newDeviceState(lib nvml.Interface, uuid string, interval time.Duration, opts ProcessOptions) *deviceState {
	opts = opts.withDefaults()
	return &deviceState{
		lib: lib, interval: interval, opts: opts,
		procs: newProcessTracker(uuid, opts),
		usage: newUsageReader(opts, interval),
		mig:   migTracker{byHandle: map[nvml.Device]*migIdentity{}},
		gpm:   gpmTracker{mig: map[int]*gpmPair{}},
	}
}

// beginCycle invalidates the readings of the previous cycle.
func (st *deviceState) beginCycle() {
	if st != nil {
		st.cycle++
	}
}

// processes returns this cycle's process reading, reading NVML on first use.
func (st *deviceState) processes(r *Reader, now time.Time) *processReading {
	if st.procsRead == nil || st.procsAt != st.cycle {
		mig := st.migInstances(r)
		st.procsRead = st.procs.read(r, now, st.interval, mig)
		st.procsAt = st.cycle
	}
	return st.procsRead
}

// migInstances returns this cycle's MIG reading.
func (st *deviceState) migInstances(r *Reader) *migReading {
	if st.migRead == nil || st.migAt != st.cycle {
		st.migRead = st.mig.read(r)
		st.migAt = st.cycle
	}
	return st.migRead
}

// gpmMetrics returns this cycle's GPM reading.
func (st *deviceState) gpmMetrics(r *Reader) *gpmReading {
	if st.gpmRead == nil || st.gpmAt != st.cycle {
		mig := st.migInstances(r)
		st.gpmRead = st.gpm.read(r, st.lib, mig)
		st.gpmAt = st.cycle
	}
	return st.gpmRead
}
