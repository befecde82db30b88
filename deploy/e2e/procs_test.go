package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the module root, relative to this package's directory.
const repoRoot = "../.."

// binaries are the programs the test runs.
type binaries struct {
	exporter, loadgen, prometheus string
}

// findBinaries takes the programs from $GPULENS_BIN (the Makefile's bin/)
// where they exist and builds the others into dir, in parallel.
func findBinaries(ctx context.Context, t *testing.T, dir string) binaries {
	t.Helper()
	type build struct {
		out  *string
		name string
		pkgs []string
	}
	var b binaries
	builds := []build{
		{&b.exporter, "gpulens-exporter", []string{"./cmd/gpulens-exporter"}},
		{&b.loadgen, "gpulens-loadgen", []string{"./cmd/gpulens-loadgen"}},
		{&b.prometheus, "prometheus", []string{"github.com/prometheus/prometheus/cmd/prometheus"}},
	}
	binDir := os.Getenv("GPULENS_BIN")
	var wg sync.WaitGroup
	errs := make([]error, len(builds))
	for i, bd := range builds {
		if binDir != "" {
			p := filepath.Join(binDir, bd.name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				*bd.out = p
				continue
			}
		}
		*bd.out = filepath.Join(dir, bd.name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			args := append([]string{"build", "-o", *bd.out}, bd.pkgs...)
			cmd := exec.CommandContext(ctx, "go", args...)
			cmd.Dir = repoRoot
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go %v: %w\n%s", args, err, out)
				return
			}
			t.Logf("built %s in %s", bd.name, time.Since(start).Round(100*time.Millisecond))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return b
}

// logBuffer collects a process's output for concurrent reading.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a started program in its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *logBuffer
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// startProc starts bin in its own process group. A cleanup stops the whole
// group (SIGTERM, then SIGKILL after 5 s) and, when the test failed, logs the
// end of the program's output.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: &logBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			out := p.log.String()
			if len(out) > 6000 {
				out = "...\n" + out[len(out)-6000:]
			}
			t.Logf("%s %v output:\n%s", name, args, out)
		}
	})
	return p
}

// stop ends the process group and waits for the process.
func (p *proc) stop() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything the program left behind in its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

var (
	listeningRe = regexp.MustCompile(`msg="Listening on"(?: [a-z_]+=\S+)* address=([0-9.:\[\]]+)`)
	simServerRe = regexp.MustCompile(`msg="simulated inference server listening" address=([0-9.:\[\]]+)`)
)

// address waits for the log line matching re (whose first group is the
// address the program listens on: the tests use port 0).
func (p *proc) address(ctx context.Context, t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := re.FindStringSubmatch(p.log.String()); m != nil {
			return m[1]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: no %q line in its log: %v", p.name, re, ctx.Err())
		case <-p.done:
			t.Fatalf("%s exited before listening: %v", p.name, p.err)
		case <-tick.C:
		}
	}
}
