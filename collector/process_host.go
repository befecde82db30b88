package collector

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The host's view of the GPU processes: CPU time, threads, resident memory
// and I/O, from /proc/PID/stat and /proc/PID/io (or a ProcessUsageSource).
// Only the processes the process collector keeps (the top MaxPerGPU by GPU
// memory) are read; the pid="other" series has no host series, so the cost
// does not grow with the folded processes.
//
// What it costs, and what is cached (docs/benchmarks.md): a process is read
// when first seen, then once every UsageInterval, spread over the cycles by
// pid; its two files stay open between reads (one pread each instead of
// open, read and close, and a pid reused by another process fails the read
// instead of being read in its place); /proc/PID/io that is absent or
// unreadable is not tried again for that process; and the six series of a
// process are built once per read, with label pairs built once per process
// (processSeries), and reused as they are until the next read.

// DefaultUsageInterval is how often a GPU process's CPU, memory and I/O
// counters are read again (ProcessOptions.UsageInterval).
const DefaultUsageInterval = 5 * time.Second

// DefaultClockTick is USER_HZ, the unit of the CPU times of /proc/PID/stat:
// 100 per second on every Linux architecture gpulens runs on.
const DefaultClockTick = 100

// ProcessUsage is what the host says one process uses.
type ProcessUsage struct {
	// UserSeconds and SystemSeconds are the CPU time the process (all its
	// threads) spent in user and kernel mode since it started.
	UserSeconds, SystemSeconds float64
	Threads                    uint64
	ResidentBytes              uint64
	// IO is true when ReadBytes and WrittenBytes were read (/proc/PID/io
	// exists and is readable); false omits the I/O series.
	IO bool
	// ReadBytes and WrittenBytes are the bytes the process caused to be
	// fetched from and sent to storage (read_bytes, write_bytes).
	ReadBytes, WrittenBytes uint64
}

// ProcessUsageSource reads a process's usage from somewhere other than
// procfs (a simulated fleet). It is called from every GPU's sampler
// goroutine and must be safe for concurrent use; false when it does not
// know the process.
type ProcessUsageSource interface {
	ProcessUsage(pid uint32) (ProcessUsage, bool)
}

var (
	hostCPUDesc = processDesc("cpu_seconds_total",
		"CPU time the GPU process (all its threads) spent in user and system mode since it started (/proc/PID/stat utime and stime over the clock tick). Read when the process is first seen, then every 5 s; absent for pid=\"other\" and where procfs cannot tell.", "mode")
	hostThreadsDesc = processDesc("threads",
		"Threads of the GPU process (/proc/PID/stat num_threads).")
	hostRSSDesc = processDesc("resident_memory_bytes",
		"Host memory resident for the GPU process (/proc/PID/stat rss times the page size).")
	hostIOReadDesc = processDesc("io_read_bytes_total",
		"Bytes the GPU process caused to be read from storage (/proc/PID/io read_bytes; page-cache hits and network reads are not counted). Absent where /proc/PID/io is missing or not readable (containers, permissions).")
	hostIOWrittenDesc = processDesc("io_written_bytes_total",
		"Bytes the GPU process caused to be written to storage (/proc/PID/io write_bytes). Absent where /proc/PID/io is missing or not readable.")
)

// hostDescs are the descriptions the process collector adds.
var hostDescs = []*prometheus.Desc{hostCPUDesc, hostThreadsDesc, hostRSSDesc, hostIOReadDesc, hostIOWrittenDesc}

// ioState is what is known of a process's /proc/PID/io.
type ioState uint8

const (
	ioUnknown     ioState = iota
	ioOK                  // open
	ioUnavailable         // absent or not readable: not tried again
)

// hostProc is the host state of one process (kept on its procInfo, so it
// lives while NVML lists the pid and is dropped with it).
type hostProc struct {
	read  bool   // read at least once
	ok    bool   // the last read succeeded
	seq   uint64 // reads so far: the series of a reading are built once
	usage ProcessUsage

	stat, io *os.File
	ioState  ioState
}

func (h *hostProc) close() {
	if h == nil {
		return
	}
	if h.stat != nil {
		_ = h.stat.Close()
		h.stat = nil
	}
	if h.io != nil {
		_ = h.io.Close()
		h.io = nil
	}
}

// usageReader reads the usage of the GPU processes of one GPU; it runs on
// that GPU's sampler goroutine only.
type usageReader struct {
	root      string
	src       ProcessUsageSource // nil: procfs under root
	clockTick float64
	pageSize  float64
	every     uint64 // read a process every this many cycles
	open      func(name string) (*os.File, error)
	buf       []byte
	path      []byte
	reads     int // reads of a process, for tests
}

func newUsageReader(opts ProcessOptions, interval time.Duration) *usageReader {
	every := uint64(1)
	if interval > 0 && opts.UsageInterval > interval {
		every = uint64((opts.UsageInterval + interval/2) / interval)
	}
	return &usageReader{
		root: opts.ProcRoot, src: opts.Usage, every: every,
		clockTick: float64(opts.ClockTick), pageSize: float64(opts.PageSize),
		open: os.Open, buf: make([]byte, 4096),
	}
}

// due reports whether a process is read in this cycle: when first seen,
// then every `every` cycles, spread over the cycles by pid.
func (u *usageReader) due(h *hostProc, pid uint32, cycle uint64) bool {
	return !h.read || (cycle+uint64(pid))%u.every == 0
}

// emit reads a kept process if it is due and emits its host series with
// the label pairs ps: built anew from a new reading, else the series of its
// last reading as they are.
func (u *usageReader) emit(e *Emitter, p *gpuProcess, ps *processSeries, cycle uint64) {
	info := p.info
	if info.host == nil {
		info.host = &hostProc{}
	}
	h := info.host
	if u.due(h, p.pid, cycle) {
		u.reads++
		h.read = true
		h.seq++
		h.ok = u.readProcess(p.pid, info, h)
	}
	if !h.ok {
		return
	}
	if ps.host == nil || ps.hostSeq != h.seq {
		us := &h.usage
		ms := new([6]fixedMetric)
		ms[0].set(hostCPUDesc, ps.cpu[0], prometheus.CounterValue, us.UserSeconds)
		ms[1].set(hostCPUDesc, ps.cpu[1], prometheus.CounterValue, us.SystemSeconds)
		ms[2].set(hostThreadsDesc, ps.base, prometheus.GaugeValue, float64(us.Threads))
		ms[3].set(hostRSSDesc, ps.base, prometheus.GaugeValue, float64(us.ResidentBytes))
		n := 4
		if us.IO {
			ms[4].set(hostIOReadDesc, ps.base, prometheus.CounterValue, float64(us.ReadBytes))
			ms[5].set(hostIOWrittenDesc, ps.base, prometheus.CounterValue, float64(us.WrittenBytes))
			n = 6
		}
		ps.host = ps.host[:0]
		for i := range n {
			ps.host = append(ps.host, &ms[i])
		}
		ps.hostSeq = h.seq
	}
	e.metrics = append(e.metrics, ps.host...)
}

// readProcess fills h.usage; false when the process cannot be read.
func (u *usageReader) readProcess(pid uint32, info *procInfo, h *hostProc) bool {
	if u.src != nil {
		us, ok := u.src.ProcessUsage(pid)
		h.usage = us
		return ok
	}
	var us ProcessUsage
	data, err := u.readOpen(&h.stat, pid, "stat")
	if err != nil {
		return false
	}
	st, ok := parseStat(data)
	if !ok {
		return false
	}
	if info.starttime != 0 && st.starttime != info.starttime {
		// Another process has the pid now: its identity is read again
		// next cycle, and it is read afresh.
		info.checked = time.Time{}
		h.close()
		h.ioState = ioUnknown
		return false
	}
	us.UserSeconds = float64(st.utime) / u.clockTick
	us.SystemSeconds = float64(st.stime) / u.clockTick
	us.Threads = st.threads
	us.ResidentBytes = uint64(float64(st.rss) * u.pageSize)
	if h.ioState != ioUnavailable {
		data, err := u.readOpen(&h.io, pid, "io")
		switch {
		case err == nil:
			if rd, wr, ok := parseIO(data); ok {
				h.ioState = ioOK
				us.IO, us.ReadBytes, us.WrittenBytes = true, rd, wr
			}
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
			if h.ioState == ioUnknown {
				h.ioState = ioUnavailable // no I/O accounting, or not ours to read
			}
		}
	}
	h.usage = us
	return true
}

// readOpen reads /proc/PID/name through *f, opening it first if needed. A
// file that no longer reads (its process is gone) is closed and the path
// opened again, for the process that may have the pid now.
func (u *usageReader) readOpen(f **os.File, pid uint32, name string) ([]byte, error) {
	if *f != nil {
		if data, err := u.readAt(*f); err == nil {
			return data, nil
		}
		_ = (*f).Close()
		*f = nil
	}
	u.path = append(u.path[:0], u.root...)
	u.path = append(u.path, '/')
	u.path = strconv.AppendUint(u.path, uint64(pid), 10)
	u.path = append(u.path, '/')
	u.path = append(u.path, name...)
	file, err := u.open(string(u.path))
	if err != nil {
		return nil, err
	}
	data, err := u.readAt(file)
	if err != nil {
		_ = file.Close()
		return nil, err
	}
	*f = file
	return data, nil
}

// readAt reads a procfs file from its start (procfs regenerates the
// content on a read at offset 0).
func (u *usageReader) readAt(f *os.File) ([]byte, error) {
	n, err := f.ReadAt(u.buf, 0)
	if n > 0 && (err == nil || err == io.EOF) {
		return u.buf[:n], nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return nil, err
}

// procStat holds the fields of /proc/PID/stat the collector uses.
type procStat struct {
	utime, stime, threads, starttime, rss uint64
}

// parseStat reads utime (field 14), stime (15), num_threads (20),
// starttime (22) and rss (24) of a /proc/PID/stat line. The command name
// (field 2, in parentheses) may hold spaces and parentheses: fields are
// counted after its last ')'.
func parseStat(b []byte) (procStat, bool) {
	var st procStat
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st, false
	}
	b = b[i+1:]
	field := 2 // the last field read
	for field < 24 {
		for len(b) > 0 && b[0] == ' ' {
			b = b[1:]
		}
		if len(b) == 0 {
			return st, false
		}
		end := bytes.IndexByte(b, ' ')
		if end < 0 {
			end = len(b)
		}
		tok := b[:end]
		b = b[end:]
		field++
		var dst *uint64
		switch field {
		case 14:
			dst = &st.utime
		case 15:
			dst = &st.stime
		case 20:
			dst = &st.threads
		case 22:
			dst = &st.starttime
		case 24:
			dst = &st.rss
		default:
			continue
		}
		v, ok := parseUint(bytes.TrimRight(tok, "\n"))
		if !ok {
			return st, false
		}
		*dst = v
	}
	return st, true
}

// parseIO reads read_bytes and write_bytes of /proc/PID/io.
func parseIO(b []byte) (read, written uint64, ok bool) {
	var haveR, haveW bool
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, found := bytes.CutPrefix(line, []byte("read_bytes:")); found {
			read, haveR = parseUintField(v)
		} else if v, found := bytes.CutPrefix(line, []byte("write_bytes:")); found {
			written, haveW = parseUintField(v)
		}
	}
	return read, written, haveR && haveW
}

func parseUintField(b []byte) (uint64, bool) {
	return parseUint(bytes.TrimSpace(b))
}

// parseUint parses a decimal without allocating; false on anything else
// or on overflow.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
