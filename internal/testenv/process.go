package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// DefaultStopTimeout is how long Stop waits after SIGTERM before it kills.
const DefaultStopTimeout = 5 * time.Second

// logTail is how much of a program's log a failed test prints.
const logTail = 6000

// Process is a program a test started: a binary in its own process group
// (Start) or a run function on its own goroutine (StartFunc).
type Process struct {
	// Name names the program in messages.
	Name string
	// StopTimeout is how long Stop waits for the program to end after
	// SIGTERM (after cancelling its context, in-process) before it kills
	// the process group (gives up on the goroutine).
	StopTimeout time.Duration

	log    *Log
	cmd    *exec.Cmd          // nil in-process
	cancel context.CancelFunc // in-process
	done   chan struct{}
	err    error // the program's result, once done is closed
}

// Start starts bin with args in its own process group, its standard
// output and error into Log. The caller stops it (Stop); Run does that for a
// test.
func Start(bin string, args ...string) (*Process, error) {
	return StartEnv(nil, bin, args...)
}

// StartEnv is Start with env ("KEY=value") added to the test's
// environment for the program (a later entry wins, as in exec.Cmd.Env).
func StartEnv(env []string, bin string, args ...string) (*Process, error) {
	p := &Process{Name: filepath.Base(bin), StopTimeout: DefaultStopTimeout, log: &Log{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child the program left behind may hold the output pipe open: stop
	// copying from it this long after the program ended.
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// StartFunc runs a program's run function on its own goroutine, as a test
// of a main package does: run gets a context that Stop cancels and a writer
// for its log, and returns the exit status (non-zero is an error).
func StartFunc(name string, run func(ctx context.Context, log io.Writer) int) *Process {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Process{Name: name, StopTimeout: DefaultStopTimeout, log: &Log{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		if code := run(ctx, p.log); code != 0 {
			p.err = fmt.Errorf("exit status %d", code)
		}
		close(p.done)
	}()
	return p
}

// Run starts bin for the test t: it fails t if the program cannot start,
// and stops it when t ends, printing the end of its log if t failed.
func Run(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	return RunEnv(t, nil, bin, args...)
}

// RunEnv is Run with env added to the program's environment (StartEnv).
func RunEnv(t testing.TB, env []string, bin string, args ...string) *Process {
	t.Helper()
	p, err := StartEnv(env, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	p.cleanup(t, args)
	return p
}

// RunFunc is StartFunc for the test t, with Run's clean-up.
func RunFunc(t testing.TB, name string, run func(ctx context.Context, log io.Writer) int) *Process {
	t.Helper()
	p := StartFunc(name, run)
	p.cleanup(t, nil)
	return p
}

func (p *Process) cleanup(t testing.TB, args []string) {
	t.Cleanup(func() {
		if err := p.Stop(); errors.Is(err, errStuck) {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s %q output:\n%s", p.Name, args, p.log.Tail(logTail))
		}
	})
}

// Log returns the program's output so far.
func (p *Process) Log() string { return p.log.String() }

// Done is closed when the program has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the program has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the program's result (nil for exit status 0) once Done is closed.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Pid is the process id of a started binary; 0 in-process.
func (p *Process) Pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the program (to a binary's process; in-process, any
// signal cancels the run function's context).
func (p *Process) Signal(sig os.Signal) error {
	if p.cmd == nil {
		p.cancel()
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

var errStuck = errors.New("still running")

// Stop ends the program and waits for it, and returns its result: SIGTERM
// to a binary's process group, then SIGKILL after StopTimeout (and SIGKILL
// to anything it left in its group); in-process, it cancels the context and
// waits up to StopTimeout. Stopping twice is harmless.
func (p *Process) Stop() error {
	if p.cmd == nil {
		p.cancel()
		select {
		case <-p.done:
			return p.err
		case <-time.After(p.StopTimeout):
			return fmt.Errorf("%s: %w %s after its context was cancelled", p.Name, errStuck, p.StopTimeout)
		}
	}
	pgid := p.cmd.Process.Pid
	if !p.Exited() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(p.StopTimeout):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return p.err
}

// Address waits until the program's log names the address it listens on
// (see ListenAddress) and returns it. It fails when ctx ends or the program
// exits first, with the log in the error.
func (p *Process) Address(ctx context.Context) (string, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if addr, ok := ListenAddress(p.log.String()); ok {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: no listen address in its log (%w):\n%s", p.Name, ctx.Err(), p.log.Tail(logTail))
		case <-p.done:
			return "", fmt.Errorf("%s exited before listening (%v):\n%s", p.Name, p.err, p.log.Tail(logTail))
		case <-tick.C:
		}
	}
}

// MustAddress is Address for a test: it fails t on error.
func (p *Process) MustAddress(ctx context.Context, t testing.TB) string {
	t.Helper()
	addr, err := p.Address(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
