package collector

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/procfs"
)

// procRevalidate is how often a cached process's start time is checked again
// (a pid could be reused while it stays listed by NVML).
const procRevalidate = time.Minute

// maxCmdlineBytes caps the cmdline label.
const maxCmdlineBytes = 256

// procInfo is what procfs and the attributor say about one process.
type procInfo struct {
	name, cmdline, user string
	attr                Attribution
	starttime           uint64 // clock ticks after boot; 0 when the process could not be read
	checked             time.Time
	host                *hostProc // CPU, memory and I/O (process_host.go); nil until read
}

// procCache reads process names, command lines, users and container
// attribution once per process (pid and start time). An entry lives while
// NVML keeps listing the pid; its start time is checked again every
// procRevalidate. A process that cannot be read (it exited between the NVML
// read and the procfs read, or procfs is not the host's) gets empty fields,
// never an error.
type procCache struct {
	fs      procfs.FS
	fsOK    bool
	attr    ProcessAttributor
	entries map[uint32]*procInfo
	reads   int // full reads, for tests
}

func newProcCache(root string, attr ProcessAttributor) *procCache {
	c := &procCache{attr: attr, entries: map[uint32]*procInfo{}}
	if fs, err := procfs.NewFS(root); err == nil {
		c.fs, c.fsOK = fs, true
	}
	return c
}

func (c *procCache) get(pid uint32, now time.Time) *procInfo {
	e := c.entries[pid]
	if e != nil && now.Sub(e.checked) < procRevalidate {
		return e
	}
	if e != nil {
		if st := c.starttime(pid); st == e.starttime && st != 0 {
			e.checked = now
			return e
		}
		e.host.close()
	}
	e = c.read(pid)
	e.checked = now
	c.entries[pid] = e
	return e
}

func (c *procCache) starttime(pid uint32) uint64 {
	if !c.fsOK {
		return 0
	}
	p, err := c.fs.Proc(int(pid))
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return st.Starttime
}

func (c *procCache) read(pid uint32) *procInfo {
	c.reads++
	e := &procInfo{}
	if c.attr != nil {
		e.attr = c.attr.Attribute(pid)
		e.name, e.cmdline, e.user = e.attr.ProcessName, e.attr.Cmdline, e.attr.User
	}
	if !c.fsOK {
		return e
	}
	p, err := c.fs.Proc(int(pid))
	if err != nil {
		return e // gone: keep what NVML said
	}
	if st, err := p.Stat(); err == nil {
		e.starttime = st.Starttime
		e.name = st.Comm
	}
	if comm, err := p.Comm(); err == nil && comm != "" {
		e.name = comm
	}
	if args, err := p.CmdLine(); err == nil {
		e.cmdline = truncateUTF8(strings.Join(args, " "), maxCmdlineBytes)
	}
	if s, err := p.NewStatus(); err == nil {
		e.user = strconv.FormatUint(s.UIDs[0], 10)
	}
	e.name = strings.ToValidUTF8(e.name, "\uFFFD")
	return e
}

// retain drops the processes for which live is false.
func (c *procCache) retain(live func(pid uint32) bool) {
	for pid, e := range c.entries {
		if !live(pid) {
			e.host.close()
			delete(c.entries, pid)
		}
	}
}

// truncateUTF8 makes s valid UTF-8 and at most n bytes, cut on a rune
// boundary.
func truncateUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
