package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a program (see TestMain).
const helperEnv = "TESTENV_HELPER"

// TestMain runs the test binary as a stand-in program when helperEnv is set:
//
//	serve     logs "Listening on" like exporter-toolkit, serves /metrics,
//	          exits 0 on SIGTERM
//	stubborn  the same, but ignores SIGTERM (its process group is killed)
//	fail      writes a line and exits 3 without listening
//	streams   writes to its standard output and error in turn, the last
//	          line $TESTENV_VALUE, and exits 0
//	family    starts a child that sleeps holding its output, prints the
//	          child's pid, and sleeps itself
//	sleep     sleeps for a minute
func TestMain(m *testing.M) {
	switch mode := os.Getenv(helperEnv); mode {
	case "":
		os.Exit(m.Run())
	case "serve", "stubborn":
		os.Exit(helperServe(mode == "stubborn"))
	case "fail":
		fmt.Fprintln(os.Stderr, "level=ERROR msg=\"cannot start\" err=\"bad flag\"")
		os.Exit(3)
	case "streams":
		fmt.Fprintln(os.Stdout, "out 1")
		fmt.Fprintln(os.Stderr, "err 1")
		fmt.Fprintln(os.Stdout, "out 2")
		fmt.Fprintln(os.Stdout, os.Getenv("TESTENV_VALUE"))
		os.Exit(0)
	case "family":
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), helperEnv+"=sleep")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(child.Process.Pid)
		if f := os.Getenv("TESTENV_PIDFILE"); f != "" {
			if err := os.WriteFile(f, []byte(strconv.Itoa(child.Process.Pid)), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		time.Sleep(time.Minute) // not a wait: a program that hangs, killed by the test
		os.Exit(0)
	case "sleep":
		time.Sleep(time.Minute) // not a wait: a program that hangs, killed by the test
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%s\n", helperEnv, mode)
		os.Exit(2)
	}
}

func helperServe(stubborn bool) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Like Prometheus: an earlier line with the configured port 0.
	logger.Info("Start listening for connections", "component", "web", "address", "127.0.0.1:0")
	logger.Info("Listening on", "component", "web", "address", ln.Addr().String())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "# accept %s\nup 1\n", r.Header.Get("Accept"))
	})}
	go func() { _ = srv.Serve(ln) }()
	for {
		<-sig
		if !stubborn {
			fmt.Fprintln(os.Stderr, "level=INFO msg=\"shutting down\"")
			return 0
		}
	}
}

func TestListenAddress(t *testing.T) {
	for _, tc := range []struct {
		name, log, want string
	}{
		{"exporter-toolkit", `time=2026-01-01T00:00:00.000Z level=INFO source=tls_config.go:395 msg="Listening on" address=127.0.0.1:40123` + "\n", "127.0.0.1:40123"},
		{"prometheus after its port-0 line",
			`time=x level=INFO source=web.go:731 msg="Start listening for connections" component=web address=127.0.0.1:0` + "\n" +
				`time=x level=INFO source=tls_config.go:395 msg="Listening on" component=web address=127.0.0.1:39675` + "\n", "127.0.0.1:39675"},
		{"quoted attribute before the address", `msg="Listening on" component="web ui" address=[::1]:9090 http2=false`, "[::1]:9090"},
		{"load generator's simulated server", `level=INFO msg="simulated inference server listening" address=127.0.0.1:8123 model=m ttft=20ms`, "127.0.0.1:8123"},
		{"first of two", `msg="Listening on" address=127.0.0.1:1111` + "\n" + `msg="Listening on" address=127.0.0.1:2222`, "127.0.0.1:1111"},
		{"port 0 only", `msg="Listening on" address=127.0.0.1:0`, ""},
		{"another message", `msg="Listening on systemd activated listeners instead of port listeners."`, ""},
		{"nothing yet", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ListenAddress(tc.log)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("ListenAddress = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// The log is written and read concurrently (run with -race); Tail keeps the
// end.
func TestLog(t *testing.T) {
	var l Log
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&l, "%d", i)
				_ = l.String()
			}
		})
	}
	wg.Wait()
	if n := len(l.String()); n != 400 {
		t.Errorf("log holds %d bytes, want 400", n)
	}
	l = Log{}
	_, _ = io.WriteString(&l, "0123456789")
	if got := l.Tail(4); got != "...\n6789" {
		t.Errorf("Tail(4) = %q", got)
	}
	if got := l.Tail(10); got != "0123456789" {
		t.Errorf("Tail(10) = %q", got)
	}
}

func helper(t *testing.T, mode string) string {
	t.Helper()
	t.Setenv(helperEnv, mode)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// A program is started, found listening, scraped with the format asked for,
// and stopped by SIGTERM with exit status 0.
func TestRunScrapeStop(t *testing.T) {
	p := Run(t, helper(t, "serve"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := p.MustAddress(ctx, t)
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("address %q", addr)
	}
	body, err := Scrape(ctx, "http://"+addr+"/metrics", AcceptProtobuf)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# accept " + AcceptProtobuf + "\nup 1\n"; string(body) != want {
		t.Errorf("scrape = %q, want %q", body, want)
	}
	if _, err := Scrape(ctx, "http://"+addr+"/nothing", ""); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("scraping a missing path: %v, want a 404 error", err)
	}
	if p.Exited() || p.Pid() == 0 {
		t.Fatalf("exited %v, pid %d", p.Exited(), p.Pid())
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop = %v, want exit status 0", err)
	}
	if !p.Exited() || !strings.Contains(p.Log(), "shutting down") {
		t.Errorf("after Stop: exited %v, log:\n%s", p.Exited(), p.Log())
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop = %v", err)
	}
}

// A program that ignores SIGTERM is killed after StopTimeout.
func TestStopKillsAfterTimeout(t *testing.T) {
	p, err := Start(helper(t, "stubborn"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Address(ctx); err != nil {
		t.Fatal(err)
	}
	p.StopTimeout = 100 * time.Millisecond
	begin := time.Now()
	err = p.Stop()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop = %v, want the process killed", err)
	}
	if d := time.Since(begin); d < p.StopTimeout {
		t.Errorf("killed after %s, before the %s timeout", d, p.StopTimeout)
	}
}

// A program that exits before listening: Address says so, with its log.
func TestAddressOfExitedProgram(t *testing.T) {
	p, err := Start(helper(t, "fail"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = p.Address(ctx)
	if err == nil || !strings.Contains(err.Error(), "exited before listening (exit status 3)") || !strings.Contains(err.Error(), "bad flag") {
		t.Errorf("Address = %v; want the exit and the log", err)
	}
	if p.Err() == nil {
		t.Error("Err() = nil after exit status 3")
	}
}

// A program still silent when the context ends: Address names the deadline.
func TestAddressDeadline(t *testing.T) {
	p := RunFunc(t, "silent", func(ctx context.Context, w io.Writer) int {
		fmt.Fprintln(w, "starting")
		<-ctx.Done()
		return 0
	})
	// The deadline starts once the program has logged (a goroutine that a
	// loaded machine may run late): the log must be in the error.
	wait, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	Eventually(wait, t, time.Millisecond, "the program's first line", func() (bool, string) {
		return strings.Contains(p.Log(), "starting"), p.Log()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Address(ctx); err == nil || !strings.Contains(err.Error(), "deadline exceeded") || !strings.Contains(err.Error(), "starting") {
		t.Errorf("Address = %v; want the deadline and the log", err)
	}
}

// In-process: the run function gets the log and a context that Stop
// cancels; its exit status becomes Err; a function that ignores the
// cancellation is reported after StopTimeout.
func TestStartFunc(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := StartFunc("inproc", func(ctx context.Context, w io.Writer) int {
		slog.New(slog.NewTextHandler(w, nil)).Info("Listening on", "address", ln.Addr().String())
		<-ctx.Done()
		return 4
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if addr, err := p.Address(ctx); err != nil || addr != ln.Addr().String() {
		t.Errorf("Address = %q, %v; want %s", addr, err, ln.Addr())
	}
	if p.Pid() != 0 {
		t.Errorf("Pid = %d in-process", p.Pid())
	}
	if err := p.Stop(); err == nil || err.Error() != "exit status 4" {
		t.Errorf("Stop = %v, want exit status 4", err)
	}

	release := make(chan struct{})
	defer close(release)
	stuck := StartFunc("stuck", func(context.Context, io.Writer) int { <-release; return 0 })
	stuck.StopTimeout = 50 * time.Millisecond
	if err := stuck.Stop(); err == nil || !strings.Contains(err.Error(), "stuck: still running 50ms") {
		t.Errorf("Stop of a stuck function = %v", err)
	}
}

// GPULENS_BIN's programs are used as they are; a name without a build is
// refused.
func TestBinaryFromBinEnv(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "gpulens-exporter")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(BinEnv, dir)
	if got := Binary(t, "gpulens-exporter"); got != exe {
		t.Errorf("Binary = %q, want %q", got, exe)
	}
}

// A program is built once into the go command's build cache: asked twice,
// cached returns the same file, which runs and stays.
func TestCached(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	root := t.TempDir()
	// A program no other run has cached: the first call builds it.
	text := fmt.Sprintf("hello %d", time.Now().UnixNano())
	for name, body := range map[string]string{
		"go.mod":  "module example.com/hello\n\ngo 1.22\n",
		"main.go": fmt.Sprintf("package main\n\nfunc main() { println(%q) }\n", text),
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := cached(ctx, root, ".")
	if err != nil {
		t.Fatal(err)
	}
	again, err := cached(ctx, root, ".")
	if err != nil || again != first {
		t.Errorf("second call: %q, %v; want %q again", again, err, first)
	}
	if out, err := exec.Command(first).CombinedOutput(); err != nil || string(out) != text+"\n" {
		t.Errorf("%s: %q, %v; want %q", first, out, err, text)
	}
	if strings.HasPrefix(first, root) {
		t.Errorf("%s lies in the module's folder, not in the build cache", first)
	}
	if _, err := cached(ctx, root, "./missing"); err == nil || !strings.Contains(err.Error(), "go run -exec echo ./missing") {
		t.Errorf("a missing package: %v", err)
	}
}

// Build flags are part of what the build cache keeps: one executable per
// -ldflags, each with its own -X value.
func TestCachedBuildFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	root := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":  "module example.com/version\n\ngo 1.22\n",
		"main.go": fmt.Sprintf("package main\n\nvar version = \"unset\"\n\nfunc main() { println(%q, version) }\n", root),
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	paths := map[string]string{}
	for _, v := range []string{"1.2.3", "4.5.6"} {
		p, err := cached(ctx, root, ".", "-ldflags", "-X main.version="+v)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(p).CombinedOutput(); err != nil || string(out) != root+" "+v+"\n" {
			t.Errorf("%s (-X main.version=%s): %q, %v", p, v, out, err)
		}
		paths[p] = v
	}
	if len(paths) != 2 {
		t.Errorf("two -ldflags, executables %v; want two", paths)
	}
}

// TestPoll: Poll calls f at once and then every interval until it is true,
// and gives up (false) when the context ends.
func TestPoll(t *testing.T) {
	calls := 0
	if !Poll(context.Background(), time.Millisecond, func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Errorf("Poll = false or %d calls, want true after 3", calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	if Poll(ctx, time.Hour, func() bool { calls++; return false }) || calls != 1 {
		t.Errorf("Poll on an ended context: true or %d calls, want false after 1", calls)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message instead of
// ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

// TestEventually: a condition that comes true passes silently after as many
// checks as it took; one that never does fails the test with what was
// awaited, why the wait ended and what was seen last.
func TestEventually(t *testing.T) {
	t.Parallel()
	r := &fatalRecorder{TB: t}
	calls := 0
	Eventually(context.Background(), r, time.Millisecond, "three calls", func() (bool, string) {
		calls++
		return calls == 3, fmt.Sprint(calls)
	})
	if r.msg != "" || calls != 3 {
		t.Errorf("a condition true at the third call: %d calls, failure %q", calls, r.msg)
	}

	// A condition never true, its context ended at the third check (not
	// by a clock: a loaded machine may check a timed context only once).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls = 0
	Eventually(ctx, r, 5*time.Millisecond, "the queue to drain", func() (bool, string) {
		calls++
		if calls == 3 {
			cancel()
		}
		return false, fmt.Sprintf("%d items left", 7-calls)
	})
	if calls != 3 {
		t.Errorf("a false condition was checked %d times until its context ended at the third, want 3", calls)
	}
	for _, want := range []string{"for the queue to drain", context.Canceled.Error(), fmt.Sprintf("last seen: %d items left", 7-calls)} {
		if !strings.Contains(r.msg, want) {
			t.Errorf("failure %q lacks %q", r.msg, want)
		}
	}
}

// Output separates the streams, CombinedOutput keeps their order, and both
// pass env to the program on top of the test's environment.
func TestOutput(t *testing.T) {
	t.Parallel()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	env := []string{helperEnv + "=streams", "TESTENV_VALUE=from env"}
	stdout, stderr, err := Output(ctx, env, bin)
	if err != nil || string(stdout) != "out 1\nout 2\nfrom env\n" || string(stderr) != "err 1\n" {
		t.Errorf("Output = %q, %q, %v; want the standard output's three lines and the error's one", stdout, stderr, err)
	}
	combined, err := CombinedOutput(ctx, env, bin)
	if err != nil || string(combined) != "out 1\nerr 1\nout 2\nfrom env\n" {
		t.Errorf("CombinedOutput = %q, %v; want the four lines in the order written", combined, err)
	}
	_, stderr, err = Output(ctx, []string{helperEnv + "=fail"}, bin, "-flag")
	if err == nil || !strings.Contains(err.Error(), "-flag: exit status 3") || !strings.Contains(string(stderr), "bad flag") {
		t.Errorf("a failing program: %v, stderr %q; want its arguments, exit status 3 and its output", err, stderr)
	}
}

// When the context ends, Output kills the program's whole process group:
// a child holding the output pipe does not keep it waiting (for exec.Cmd's
// WaitDelay, 2 s).
func TestOutputKillsProcessGroup(t *testing.T) {
	t.Parallel()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled once the program has started its child (however long that
	// takes on a loaded machine), not at a fixed deadline: with 500 ms the
	// child was sometimes never started.
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	started := errors.New("the child started")
	go func() {
		wait, stop := context.WithTimeout(ctx, time.Minute)
		defer stop()
		Poll(wait, 5*time.Millisecond, func() bool {
			b, err := os.ReadFile(pidFile)
			return err == nil && len(b) > 0
		})
		cancel(started)
	}()
	stdout, _, err := Output(ctx, []string{helperEnv + "=family", "TESTENV_PIDFILE=" + pidFile}, bin)
	if err == nil || !strings.Contains(err.Error(), started.Error()) {
		t.Fatalf("Output = %v, want the cancellation's cause named", err)
	}
	// Had the child kept the output pipe open, Wait would have given up
	// after WaitDelay with exec.ErrWaitDelay.
	if errors.Is(err, exec.ErrWaitDelay) {
		t.Errorf("Output = %v: the child kept the pipe open until WaitDelay", err)
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(string(stdout)))
	if perr != nil {
		t.Fatalf("stdout %q: no child pid printed", stdout)
	}
	// 20 s: well before the child would end by itself (a minute).
	wait, stop := context.WithTimeout(t.Context(), 20*time.Second)
	defer stop()
	Eventually(wait, t, 5*time.Millisecond, fmt.Sprintf("the child %d killed with its parent", pid), func() (bool, string) {
		// Gone, or a zombie nobody has reaped yet (it no longer runs).
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true, "gone"
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return errors.Is(err, os.ErrNotExist), err.Error()
		}
		// The state follows the command's closing parenthesis.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		return len(fields) > 0 && fields[0] == "Z", "state " + strings.Join(fields[:min(1, len(fields))], "")
	})
}

// RunEnv passes env to the program.
func TestRunEnv(t *testing.T) {
	t.Parallel()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := RunEnv(t, []string{helperEnv + "=streams", "TESTENV_VALUE=run env"}, bin)
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the streams helper did not exit within a minute")
	}
	if p.Err() != nil || !strings.HasSuffix(p.Log(), "run env\n") {
		t.Errorf("exit %v, log %q; want exit status 0 and the value last", p.Err(), p.Log())
	}
}

// An installed program is looked up, not built: the first of its names
// found on PATH; when none is, the test fails where the require variable
// is set (and is skipped otherwise).
func TestInstalledProgram(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	second := filepath.Join(dir, "browser-b")
	if err := os.WriteFile(second, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	prog := installedProgram{lookups: []string{"browser-a", "browser-b", "browser-c"}, requireEnv: "TESTENV_REQUIRE_BROWSER", installHint: "install.sh"}
	if got := prog.find(t, "browser"); got != second {
		t.Errorf("find = %q, want the first name found, %q", got, second)
	}
	if err := os.Remove(second); err != nil {
		t.Fatal(err)
	}
	t.Setenv(prog.requireEnv, "1")
	r := &fatalRecorder{TB: t}
	if got := prog.find(r, "browser"); got != "" || !strings.Contains(r.msg, "browser not found (tried browser-a, browser-b, browser-c) and TESTENV_REQUIRE_BROWSER is set (run install.sh)") {
		t.Errorf("a missing program with its require variable set: %q, failure %q", got, r.msg)
	}
	if _, ok := installed["chromium"]; !ok {
		t.Error("chromium is not among the installed programs")
	}
}
