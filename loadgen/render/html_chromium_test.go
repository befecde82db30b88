package render

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
)

// findChromium returns a headless-capable Chromium, or skips the test
// unless GPULENS_REQUIRE_CHROMIUM is set (then it fails). -short skips it
// always (the inner loop, make check). See testenv.Binaries.
func findChromium(t *testing.T) string {
	t.Helper()
	return testenv.Binary(t, "chromium")
}

// runChromium opens file in headless Chromium with extra arguments and
// returns stdout and stderr.
func runChromium(t *testing.T, bin, file string, extra ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0"}, extra...)
	args = append(args, "file://"+file)
	// Keep Chromium away from the user's profile, caches and any display.
	env := []string{"HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + t.TempDir(), "DISPLAY="}
	stdout, stderr, err := testenv.Output(ctx, env, bin, args...)
	if err != nil {
		t.Fatalf("chromium: %v\nstderr:\n%s", err, stderr)
	}
	return string(stdout), string(stderr)
}

func consoleLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, ":CONSOLE") {
			out = append(out, l)
		}
	}
	return out
}

var (
	renderedRE = regexp.MustCompile(`<body[^>]*data-charts-rendered="(\d+)"`)
	// A chart element with its SVG content, as serialised by the browser.
	chartElemRE = regexp.MustCompile(`(?s)<figure class="chart" data-chart="([^"]+)"[^>]*>(.*?)</figure>`)
)

// TestChromiumRendersEveryChart opens the fixture report in headless
// Chromium and checks, in the DOM after scripts ran, that every chart has
// drawn marks, that the page counted them, and that nothing was logged to
// the console.
func TestChromiumRendersEveryChart(t *testing.T) {
	bin := findChromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := WriteFile(page, readFixture(t)); err != nil {
		t.Fatal(err)
	}
	dom, stderr := runChromium(t, bin, page, "--dump-dom")
	m := renderedRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("body has no data-charts-rendered after load; DOM starts:\n%.600s", dom)
	}
	if n, _ := strconv.Atoi(m[1]); n != len(Charts) {
		t.Errorf("data-charts-rendered = %d, want %d", n, len(Charts))
	}
	withContent := 0
	for _, c := range chartElemRE.FindAllStringSubmatch(dom, -1) {
		if strings.Contains(c[2], "<svg") && (strings.Contains(c[2], `<rect class="mark"`) || strings.Contains(c[2], `<circle class="mark"`)) {
			withContent++
		} else {
			t.Errorf("chart %s has no marks in the rendered DOM", c[1])
		}
	}
	if withContent != len(Charts) {
		t.Errorf("%d charts with content in the DOM, want %d", withContent, len(Charts))
	}
	if l := consoleLines(stderr); len(l) > 0 {
		t.Errorf("console output while rendering:\n%s", strings.Join(l, "\n"))
	}

	shot := filepath.Join(dir, "report.png")
	if d := os.Getenv("GPULENS_SCREENSHOT_DIR"); d != "" {
		shot = filepath.Join(d, "report.png")
	}
	runChromium(t, bin, page, "--screenshot="+shot, "--window-size=1400,2600", "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 20_000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("screenshot is %d bytes, not a rendered page", len(png))
	}
}

// TestChromiumConsoleDetection proves the console check above can fail: a
// page that logs an error is caught.
func TestChromiumConsoleDetection(t *testing.T) {
	bin := findChromium(t)
	page := filepath.Join(t.TempDir(), "bad.html")
	if err := os.WriteFile(page, []byte(`<!DOCTYPE html><html><body><script>console.error("boom from gpulens test")</script></body></html>`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr := runChromium(t, bin, page, "--dump-dom")
	l := consoleLines(stderr)
	if len(l) != 1 || !strings.Contains(l[0], "boom from gpulens test") {
		t.Errorf("console lines %q, want the one error the page logged", l)
	}
}
