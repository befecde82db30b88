package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// BinEnv names the folder of built programs (make passes bin/).
const BinEnv = "GPULENS_BIN"

// packages are the gpulens programs Binary knows, by name.
var packages = map[string]string{
	"gpulens-exporter": "./cmd/gpulens-exporter",
	"gpulens-loadgen":  "./cmd/gpulens-loadgen",
	"gpulens-verify":   "./cmd/gpulens-verify",
}

// toolModfile is the module of the pinned tools (the Prometheus server,
// promtool, helm): the Makefile builds bin/prometheus with go build
// -modfile=tools/go.mod; a test without GPULENS_BIN asks go tool
// -modfile=tools/go.mod -n for the same program.
const toolModfile = "tools/go.mod"

// tools are the programs of toolModfile that Binary knows.
var tools = map[string]bool{"prometheus": true, "promtool": true, "helm": true}

// taggedTools are the pinned programs that need build tags, which go tool
// cannot pass: the package and go run's build flags (the Makefile's make
// thanos builds bin/thanos with the same). Thanos is pinned in a module of
// its own (it needs another version of Prometheus's libraries than the
// server of toolModfile) and needs its release's tags: slicelabels, the
// labels layout its gRPC code casts to its own types.
var taggedTools = map[string][]string{
	"thanos": {"github.com/thanos-io/thanos/cmd/thanos", "-modfile=tools/thanos/go.mod", "-tags=slicelabels,netgo"},
}

// installed are the programs Binary finds installed instead of building
// them: the names (or paths) it looks up, in order, and the variable that
// turns "not installed" from a skip into a failure.
var installed = map[string]installedProgram{
	"chromium": {
		lookups:     []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"},
		requireEnv:  "GPULENS_REQUIRE_CHROMIUM",
		installHint: "scripts/ensure-chromium.sh",
	},
}

// buildTimeout bounds one build (a cold Prometheus build takes minutes on
// two cores).
const buildTimeout = 15 * time.Minute

// Binary returns the path of the program name (gpulens-exporter,
// gpulens-loadgen, gpulens-verify, the pinned prometheus, promtool,
// helm or thanos, or an installed chromium, see installed):
// $GPULENS_BIN/name where GPULENS_BIN is set and has it, else the
// executable the go command keeps in its build cache (see cached), built
// once for all test binaries until the sources change: a rebuild links in
// about a second on two cores, where a go build into each test's folder
// would link for 10–20 s each time (over a minute for Prometheus).
func Binary(t testing.TB, name string) string {
	t.Helper()
	return Binaries(t, name)[0]
}

// Binaries is Binary for several programs; those to build are built in
// parallel.
//
// Under -short a test that needs a pinned tool (a real Prometheus,
// promtool or helm) or an installed program (Chromium) is skipped: the
// inner loop (make check) neither builds nor runs them. An installed
// program that is missing skips the test, or fails it where its require
// variable (GPULENS_REQUIRE_CHROMIUM) is set.
func Binaries(t testing.TB, names ...string) []string {
	t.Helper()
	for _, name := range names {
		if _, ok := installed[name]; packages[name] == "" && !tools[name] && taggedTools[name] == nil && !ok {
			t.Fatalf("testenv: no build for %q", name)
		}
	}
	for _, name := range names {
		if (tools[name] || taggedTools[name] != nil) && testing.Short() {
			t.Skipf("-short: needs the pinned %s", name)
		}
		if _, ok := installed[name]; ok && testing.Short() {
			t.Skipf("-short: needs %s", name)
		}
	}
	out := make([]string, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		if prog, ok := installed[name]; ok {
			out[i] = prog.find(t, name)
			continue
		}
		if dir := os.Getenv(BinEnv); dir != "" {
			if p := filepath.Join(dir, name); isFile(p) {
				out[i] = p
				continue
			}
			t.Logf("%s=%s has no %s: building it", BinEnv, dir, name)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
			defer cancel()
			start := time.Now()
			root, err := moduleRoot(ctx)
			if err == nil {
				if t := taggedTools[name]; t != nil {
					out[i], err = cached(ctx, root, t[0], t[1:]...)
				} else if tools[name] {
					out[i], err = goOutput(ctx, root, "tool", "-modfile="+toolModfile, "-n", name)
				} else {
					out[i], err = cached(ctx, root, packages[name])
				}
			}
			if errs[i] = err; err == nil {
				t.Logf("%s: %s (%s)", name, out[i], time.Since(start).Round(100*time.Millisecond))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// BinaryLDFlags returns the path of the gpulens program name linked with
// go build's -ldflags ldflags (e.g. the Makefile's -X settings of
// prometheus/common/version), from the go command's build cache like
// Binary's: linked once per ldflags and source, in seconds, then found at
// once. GPULENS_BIN's programs are not used: their flags are make's.
func BinaryLDFlags(t testing.TB, name, ldflags string) string {
	t.Helper()
	pkg := packages[name]
	if pkg == "" {
		t.Fatalf("testenv: no build for %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	start := time.Now()
	root, err := moduleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cached(ctx, root, pkg, "-ldflags", ldflags)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s with -ldflags %q: %s (%s)", name, ldflags, p, time.Since(start).Round(100*time.Millisecond))
	return p
}

type installedProgram struct {
	lookups     []string
	requireEnv  string
	installHint string
}

// find returns the first of the program's lookups found (exec.LookPath);
// when none is, it skips t, or fails it where requireEnv is set.
func (prog installedProgram) find(t testing.TB, name string) string {
	t.Helper()
	if p, found := lookPath(prog.lookups); found {
		return p
	}
	if os.Getenv(prog.requireEnv) != "" {
		t.Fatalf("%s not found (tried %s) and %s is set (run %s)", name, strings.Join(prog.lookups, ", "), prog.requireEnv, prog.installHint)
		return ""
	}
	t.Skipf("%s not found (tried %s); set %s=1 to make this a failure", name, strings.Join(prog.lookups, ", "), prog.requireEnv)
	return ""
}

// lookPath returns the first of names found (exec.LookPath).
func lookPath(names []string) (string, bool) {
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// cached returns the executable of the main package pkg from the go
// command's build cache, building it there if needed. The go command caches
// the executables go run builds (Go 1.24 and later), and go run -exec echo
// prints the path it would start instead of starting it: the cached file
// when there is one; when it has just been built, a file in a temporary
// folder gone once go run returns, so the question is asked again.
// buildFlags (e.g. -ldflags) go to go run before -exec: the build cache keeps
// one executable per set of them.
func cached(ctx context.Context, root, pkg string, buildFlags ...string) (string, error) {
	args := append(append([]string{"run"}, buildFlags...), "-exec", "echo", pkg)
	for range 2 {
		p, err := goOutput(ctx, root, args...)
		if err != nil {
			return "", err
		}
		if isFile(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("go %s: the go command keeps no executable in its build cache (GOCACHE=%s)", strings.Join(args, " "), os.Getenv("GOCACHE"))
}

// goOutput runs the go command in root, with cgo on as the Makefile builds,
// and returns its output's first line.
func goOutput(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

// moduleRoot is the folder of the main module's go.mod, as the go command
// finds it from the test's folder.
func moduleRoot(ctx context.Context) (string, error) {
	gomod, err := goOutput(ctx, ".", "env", "GOMOD")
	if err != nil {
		return "", err
	}
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod), nil
}
