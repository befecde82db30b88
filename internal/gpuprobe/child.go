package gpuprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Probe children: CUDA (11 and 12) enumerates a single MIG instance per
// process, whatever CUDA_VISIBLE_DEVICES lists, so a process reaches every
// other MIG instance only through another process. A ChildProber runs one
// child process per such instance, with CUDA_VISIBLE_DEVICES set to the
// instance's MIG UUID: the same program in its probe-child mode (the
// commands' `probe-child` subcommand), which reads a ChildRequest on its
// standard input, probes the one device it sees (ServeChild) and writes a
// ChildResponse on its standard output. The child makes the same safety
// checks as an in-process probe (compute mode before any context, the free
// memory the parent read from NVML, the memory budget, the GPU-time
// budget); the parent kills it at the deadline and counts what it cost
// (Result.Child).

// ChildCommand is the subcommand that runs a program as a probe child.
const ChildCommand = "probe-child"

// ChildRequest is what a probe child reads on its standard input.
type ChildRequest struct {
	// UUID is the MIG instance to probe (the parent also sets
	// CUDA_VISIBLE_DEVICES to it): the child probes the CUDA device with
	// this UUID and no other.
	UUID   string `json:"uuid"`
	Config Config `json:"config"`
	// FreeBeforeBytes is the instance's free memory as the parent read it
	// from NVML (Options.FreeMemory), when FreeKnown.
	FreeBeforeBytes uint64 `json:"free_before_bytes,omitempty"`
	FreeKnown       bool   `json:"free_known"`
	// Timeout is the child's own deadline for the probe, shorter than the
	// one the parent kills it at, so that a slow probe still reports.
	Timeout time.Duration `json:"timeout_ns"`
}

// ChildResponse is what a probe child writes on its standard output: the
// result, or why nothing could be measured.
type ChildResponse struct {
	Result *Result         `json:"result,omitempty"`
	Error  *ChildErrorInfo `json:"error,omitempty"`
}

// ChildErrorInfo is a probe error as a child reports it: its label
// (ErrorLabel), its message and, for a CUDA error, the call and code.
type ChildErrorInfo struct {
	Label   string     `json:"label"`
	Message string     `json:"message"`
	CUDA    *CUDAError `json:"cuda,omitempty"`
}

// ChildUsage is what a probe child cost the host, from its rusage.
type ChildUsage struct {
	PID int `json:"pid"`
	// UserCPU and SystemCPU are the child's CPU time (all its threads).
	UserCPU   time.Duration `json:"user_cpu_ns"`
	SystemCPU time.Duration `json:"system_cpu_ns"`
	// MaxRSSBytes is its peak resident memory (ru_maxrss).
	MaxRSSBytes uint64 `json:"max_rss_bytes"`
	// Wall is from its start to its end, process start-up included.
	Wall time.Duration `json:"wall_ns"`
	// Killed: the child was killed at its deadline.
	Killed bool `json:"killed,omitempty"`
}

// ErrChildFailed is a probe child that gave no response.
var ErrChildFailed = errors.New("probe child failed")

// childError is a child's reported error in the parent: ErrorLabel gives
// the child's label through Unwrap.
type childError struct {
	info  ChildErrorInfo
	cause error
}

func (e *childError) Error() string { return e.info.Message }
func (e *childError) Unwrap() error { return e.cause }

// decode rebuilds the error a child reported, labelled as it was there.
func (i ChildErrorInfo) decode() error {
	var cause error
	switch i.Label {
	case LabelDeadline:
		cause = context.DeadlineExceeded
	case LabelCanceled:
		cause = context.Canceled
	case LabelBusy:
		cause = ErrBusy
	case LabelPanic:
		cause = ErrPanic
	case LabelNoDevice:
		cause = ErrNoDevice
	case LabelChildFailed:
		cause = ErrChildFailed
	}
	if i.CUDA != nil {
		cause = i.CUDA
	}
	return &childError{info: i, cause: cause}
}

// encodeChildError is err as a child reports it.
func encodeChildError(err error) *ChildErrorInfo {
	info := &ChildErrorInfo{Label: ErrorLabel(err), Message: err.Error()}
	var ce *CUDAError
	if errors.As(err, &ce) {
		c := *ce
		info.CUDA = &c
	}
	return info
}

// MinMemoryNeed is the least device memory a probe under cfg can take on
// any device: MemoryNeed with the smallest buffers (an L2 small enough for
// the smallest copy buffers). A caller that does not know a device's L2 yet
// leaves it alone only when its free memory is below MinMemoryNeed +
// cfg.ContextReserveBytes; the probe itself checks the exact need.
func MinMemoryNeed(cfg Config) uint64 {
	return MemoryNeed(DeviceInfo{L2CacheBytes: 1}, cfg)
}

// ServeChild is the probe child's side: it probes the device of req.UUID
// with p (whose driver sees what CUDA_VISIBLE_DEVICES lets it), within
// req.Timeout, and returns the response to write. A device the child does
// not see is a skip with SkipMIGInstanceNotVisible (the instance is not in
// this container, say), not an error. p's Options.FreeMemory is ignored:
// the figure is the parent's (req.FreeBeforeBytes).
func ServeChild(ctx context.Context, drv Driver, req ChildRequest, logger *slog.Logger) ChildResponse {
	if req.UUID == "" {
		return ChildResponse{Error: encodeChildError(errors.New("gpuprobe: probe child: the request names no device"))}
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	opts := Options{Logger: logger}
	if req.FreeKnown {
		opts.FreeMemory = func(d DeviceInfo) (uint64, bool) {
			return req.FreeBeforeBytes, strings.EqualFold(d.UUID, req.UUID)
		}
	}
	p := New(drv, opts)
	devs, err := p.Devices(ctx)
	if err != nil && !errors.Is(err, ErrNoDevice) && ErrorLabel(err) != LabelNoDevice {
		return ChildResponse{Error: encodeChildError(err)}
	}
	ordinal := -1
	var seen []string
	for _, d := range devs {
		seen = append(seen, d.UUID)
		if strings.EqualFold(d.UUID, req.UUID) {
			ordinal = d.Ordinal
		}
	}
	if ordinal < 0 {
		detail := fmt.Sprintf("a process with CUDA_VISIBLE_DEVICES=%s sees no such device (it sees %d: %s): the instance is not exposed to this container, or was destroyed", req.UUID, len(seen), strings.Join(seen, ", "))
		return ChildResponse{Result: &Result{Skipped: &Skip{Reason: SkipMIGInstanceNotVisible, Detail: detail}}}
	}
	res, err := p.Probe(ctx, ordinal, req.Config)
	if err != nil {
		return ChildResponse{Error: encodeChildError(err)}
	}
	return ChildResponse{Result: &res}
}

// ChildOptions configure a ChildProber.
type ChildOptions struct {
	// Path is the program to run (the running one: os.Executable).
	Path string
	// Args follow it: ChildCommand and the flags that choose its driver
	// (--cuda.library, or the simulated fleet's --sim.* flags).
	Args []string
	// Env is the child's environment before CUDA_VISIBLE_DEVICES is set to
	// the instance's UUID; nil: this process's.
	Env []string
	// Visible is this process's own CUDA_VISIBLE_DEVICES ("": unset). When
	// set, it is the operator's choice of devices: only the MIG instances
	// it names by UUID get a child, the others are skipped
	// (SkipMIGInstanceNotVisible) without one.
	Visible string
	// FreeMemory is the instance's free memory from NVML before the child
	// creates a context (keyed by DeviceInfo.UUID, the instance's); nil or
	// unknown: the child checks it with its context, as Probe does.
	FreeMemory FreeMemoryFunc
	// Margin is how much earlier than the caller's deadline the child's
	// own deadline (ChildRequest.Timeout) ends, so that it reports before
	// it is killed; 0: a tenth of the time left, at least 1 s and at most
	// 10 s.
	Margin time.Duration
	// MaxOutputBytes bounds what is read of the child's standard output
	// (its response); 0: 4 MiB. Its standard error keeps the last 4 KiB.
	MaxOutputBytes int
	Logger         *slog.Logger
}

// ChildProber probes MIG instances this process's CUDA does not show, one
// child process each, one at a time per call (the caller runs them in
// turn). It is safe for concurrent use.
type ChildProber struct {
	o ChildOptions
}

// NewChildProber returns a ChildProber running o.Path.
func NewChildProber(o ChildOptions) (*ChildProber, error) {
	if o.Path == "" {
		return nil, errors.New("gpuprobe: probe children: no program to run")
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = 4 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &ChildProber{o: o}, nil
}

// childStderrTail is how much of a child's standard error is kept.
const childStderrTail = 4 << 10

// childWaitDelay is how long after the kill Wait waits for the child's
// pipes to close.
const childWaitDelay = 2 * time.Second

// ProbeInstance probes the MIG instance uuid in a child process with
// CUDA_VISIBLE_DEVICES=uuid, under cfg, and returns its result. The child
// is killed when ctx ends (its own deadline, ChildOptions.Margin earlier,
// lets a slow probe report first); a child killed at ctx's deadline is an
// error wrapping context.DeadlineExceeded (label deadline_exceeded), one
// that ends without a response wraps ErrChildFailed (child_failed). The
// result's Child says what the child cost, on error too.
func (c *ChildProber) ProbeInstance(ctx context.Context, uuid string, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if !c.allowed(uuid) {
		return Result{Skipped: &Skip{Reason: SkipMIGInstanceNotVisible, Detail: fmt.Sprintf(
			"CUDA_VISIBLE_DEVICES=%s does not name %s: no probe child started", c.o.Visible, uuid)}}, nil
	}
	req := ChildRequest{UUID: uuid, Config: cfg}
	if c.o.FreeMemory != nil {
		req.FreeBeforeBytes, req.FreeKnown = c.o.FreeMemory(DeviceInfo{UUID: uuid})
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		margin := c.o.Margin
		if margin <= 0 {
			margin = min(max(left/10, time.Second), 10*time.Second)
		}
		req.Timeout = max(left-margin, left/2)
	}
	in, err := json.Marshal(req)
	if err != nil {
		return Result{}, fmt.Errorf("gpuprobe: probe child request: %w", err)
	}
	cmd := exec.CommandContext(ctx, c.o.Path, c.o.Args...)
	env := c.o.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(withoutVar(env, "CUDA_VISIBLE_DEVICES"), "CUDA_VISIBLE_DEVICES="+uuid)
	cmd.Stdin = bytes.NewReader(in)
	stdout := &limitedBuffer{max: c.o.MaxOutputBytes}
	stderr := &tailBuffer{max: childStderrTail}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = childWaitDelay
	setChildAttrs(cmd)
	// The parent-death signal follows the thread that started the child:
	// keep this goroutine on it until the child is reaped, so that no
	// other goroutine can end that thread (one that exits locked retires
	// its thread) while the child runs.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("gpuprobe: starting the probe child for %s (%s): %w: %w", uuid, c.o.Path, ErrChildFailed, err)
	}
	waitErr := cmd.Wait()
	usage := childUsage(cmd.ProcessState)
	usage.PID = cmd.Process.Pid
	usage.Wall = time.Since(started)
	c.o.Logger.Debug("gpuprobe: probe child ended", "uuid", uuid, "pid", usage.PID, "wall", usage.Wall,
		"cpu", usage.UserCPU+usage.SystemCPU, "max_rss", usage.MaxRSSBytes, "err", waitErr, "stderr", stderr.String())
	fail := func(err error) (Result, error) { return Result{Child: &usage}, err }
	if ctxErr := ctx.Err(); ctxErr != nil {
		usage.Killed = true
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			return fail(fmt.Errorf("gpuprobe: probe child for %s (pid %d) killed at its deadline after %s: %w", uuid, usage.PID, usage.Wall.Round(time.Millisecond), ctxErr))
		}
		return fail(fmt.Errorf("gpuprobe: probe child for %s (pid %d) killed: %w", uuid, usage.PID, ctxErr))
	}
	if stdout.over {
		return fail(fmt.Errorf("gpuprobe: probe child for %s wrote more than %d bytes: %w", uuid, c.o.MaxOutputBytes, ErrChildFailed))
	}
	var resp ChildResponse
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil || (resp.Result == nil && resp.Error == nil) {
		why := "no response"
		if err != nil {
			why = "unreadable response: " + err.Error()
		}
		if waitErr != nil {
			why += " (" + waitErr.Error() + ")"
		}
		if tail := strings.TrimSpace(stderr.String()); tail != "" {
			why += "; its log ends: " + lastLine(tail)
		}
		return fail(fmt.Errorf("gpuprobe: probe child for %s: %s: %w", uuid, why, ErrChildFailed))
	}
	if resp.Error != nil {
		return fail(resp.Error.decode())
	}
	res := *resp.Result
	res.Child = &usage
	return res, nil
}

// allowed tells whether ChildOptions.Visible lets a child reach uuid.
func (c *ChildProber) allowed(uuid string) bool {
	if strings.TrimSpace(c.o.Visible) == "" {
		return true
	}
	for _, f := range strings.Split(c.o.Visible, ",") {
		if strings.EqualFold(strings.TrimSpace(f), uuid) {
			return true
		}
	}
	return false
}

// withoutVar is env without the variable name.
func withoutVar(env []string, name string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != name {
			out = append(out, kv)
		}
	}
	return out
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// limitedBuffer keeps the first max bytes written and notes an overflow.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil // keep draining: the child must not block on a full pipe
	}
	return b.Buffer.Write(p)
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if n := len(b.buf); n > b.max {
		b.buf = append(b.buf[:0], b.buf[n-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string { return string(b.buf) }

// ReadChildRequest reads a probe child's request (its standard input, at
// most 1 MiB).
func ReadChildRequest(r io.Reader) (ChildRequest, error) {
	var req ChildRequest
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return req, fmt.Errorf("gpuprobe: probe child: reading the request: %w", err)
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return req, fmt.Errorf("gpuprobe: probe child: the request is not JSON: %w", err)
	}
	return req, nil
}

// RunChild is a probe child's main (the commands' ChildCommand): it reads
// the request on stdin, opens the driver (libcuda, which reads
// CUDA_VISIBLE_DEVICES itself, or a simulated fleet's driver given it),
// probes (ServeChild) and writes the response on stdout. It returns the
// exit status: 0 when a response was written (a probe error is one), 2 when
// the request could not be read or the response not written. The caller
// exits at once: a driver call abandoned at the deadline may still run.
func RunChild(ctx context.Context, stdin io.Reader, stdout io.Writer, open func() (Driver, error), logger *slog.Logger) int {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	req, err := ReadChildRequest(stdin)
	if err != nil {
		logger.Error("probe child", "err", err)
		return 2
	}
	var resp ChildResponse
	// The driver is never closed: the process ends right after, which
	// releases it even while an abandoned call is still inside it.
	drv, err := open()
	if err != nil {
		resp.Error = &ChildErrorInfo{Label: LabelUnavailable, Message: err.Error()}
	} else {
		resp = ServeChild(ctx, drv, req, logger)
	}
	if err := json.NewEncoder(stdout).Encode(resp); err != nil {
		logger.Error("probe child: writing the response", "err", err)
		return 2
	}
	return 0
}

// ComputeModeSkip is the skip reason of a compute mode (ComputeMode*, the
// same numbers NVML uses), "" for DEFAULT: a caller that reads the mode
// from NVML leaves the device alone without starting a child.
func ComputeModeSkip(mode int) string { return computeModeSkip(mode) }
