package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
)

var compatAddress = regexp.MustCompile(`msg="serving the DCGM-compatible view" address=(\S+)`)

// TestCompatDCGM: off, the DCGM view is nowhere (no path, no listener);
// with --compat.dcgm.listen-address it is served at /metrics on its own
// listener and at /dcgm/metrics on the main one, the same series.
func TestCompatDCGM(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	get := func(url string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	off := startExporter(t, "--sim.scenario=minimal", "--sampler.interval=100ms")
	waitUp(t, http.DefaultClient, "http://"+off+"/metrics", 1)
	if code, body := get("http://" + off + dcgmPath); code != http.StatusNotFound || strings.Contains(body, "DCGM_FI_") {
		t.Errorf("without --compat.dcgm, %s answers %d:\n%.200s", dcgmPath, code, body)
	}
	if _, body := get("http://" + off + "/metrics"); strings.Contains(body, "DCGM_FI_") {
		t.Errorf("the native view serves DCGM names")
	}

	p := testenv.RunFunc(t, "gpulens-exporter", func(ctx context.Context, log io.Writer) int {
		return run(ctx, []string{"--web.listen-address=127.0.0.1:0", "--sim.scenario=minimal", "--sampler.interval=100ms",
			"--compat.dcgm.listen-address=127.0.0.1:0"}, log)
	})
	main := p.MustAddress(ctx, t)
	var own string
	if !testenv.Poll(ctx, 50*time.Millisecond, func() bool {
		m := compatAddress.FindStringSubmatch(p.Log())
		if m != nil {
			own = m[1]
		}
		return m != nil
	}) {
		t.Fatalf("no DCGM listener logged:\n%s", p.Log())
	}
	waitUp(t, http.DefaultClient, "http://"+main+"/metrics", 1)
	// Both views once the sampler has two samples (the profiling
	// families, from GPM, need two): before that, a scrape of one view
	// and a later one of the other may straddle the second sample.
	var viaOwn, viaMain string
	testenv.Eventually(ctx, t, 100*time.Millisecond, fmt.Sprintf("DCGM_FI_DEV_GPU_TEMP and DCGM_FI_PROF_GR_ENGINE_ACTIVE at %s/metrics and %s%s", own, main, dcgmPath), func() (bool, string) {
		_, viaOwn = get("http://" + own + "/metrics")
		_, viaMain = get("http://" + main + dcgmPath)
		ready := func(body string) bool {
			return strings.Contains(body, "DCGM_FI_DEV_GPU_TEMP{") && strings.Contains(body, "DCGM_FI_PROF_GR_ENGINE_ACTIVE{")
		}
		return ready(viaOwn) && ready(viaMain), fmt.Sprintf("own listener:\n%.2000s\nmain listener:\n%.2000s", viaOwn, viaMain)
	})
	names := func(body string) string {
		var out []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "# TYPE ") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if names(viaOwn) != names(viaMain) {
		t.Errorf("the two listeners serve other families:\n%s\n---\n%s", names(viaOwn), names(viaMain))
	}
}

// TestCompatBadListenAddress: a bad address stops the exporter before it
// starts, naming the flag.
func TestCompatBadListenAddress(t *testing.T) {
	t.Parallel()
	var out testenv.Log
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := run(ctx, []string{"--web.listen-address=127.0.0.1:0", "--sim.scenario=minimal", "--compat.dcgm.listen-address=9400"}, &out)
	if code != 2 || !strings.Contains(out.String(), "--compat.dcgm.listen-address") {
		t.Errorf("exit code %d, output:\n%s", code, out.String())
	}
}

// TestCompatListenerTLSAuthHealthCounters: the DCGM view's own listener has
// the main listener's TLS and basic auth (--web.config.file), /health as
// dcgm-exporter has, and serves the fields of --compat.dcgm.counters-file
// only, FB_TOTAL added; the field gpulens has no value for is logged with
// its file and line.
func TestCompatListenerTLSAuthHealthCounters(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, pool := writeTLSConfig(t, "prometheus", "s3cret")
	counters := filepath.Join(t.TempDir(), "counters.csv")
	if err := os.WriteFile(counters, []byte("# DCGM FIELD, Prometheus metric type, help message\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).\nDCGM_FI_DEV_FB_TOTAL, gauge, Framebuffer total (in MiB).\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testenv.RunFunc(t, "gpulens-exporter", func(ctx context.Context, log io.Writer) int {
		return run(ctx, []string{"--web.listen-address=127.0.0.1:0", "--sim.scenario=minimal", "--sampler.interval=100ms",
			"--web.config.file=" + cfg, "--compat.dcgm.listen-address=127.0.0.1:0", "--compat.dcgm.counters-file=" + counters}, log)
	})
	var own string
	if !testenv.Poll(ctx, 50*time.Millisecond, func() bool {
		m := compatAddress.FindStringSubmatch(p.Log())
		if m != nil {
			own = m[1]
		}
		return m != nil
	}) {
		t.Fatalf("no DCGM listener logged:\n%s", p.Log())
	}
	// The log's "Listening on" line (what tools read the exporter's
	// address from) is the main listener's, not this one's.
	if main := p.MustAddress(ctx, t); main == own {
		t.Errorf("the log's listen address is the DCGM listener's %s", own)
	}
	if want := counters + ":3: DCGM_FI_DEV_MEMORY_TEMP: a DCGM field gpulens has no value for; not served"; !strings.Contains(p.Log(), want) {
		t.Errorf("log lacks %q:\n%s", want, p.Log())
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(path, user, pass string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+own+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("HTTPS %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header
	}
	if code, body, h := get("/health", "prometheus", "s3cret"); code != http.StatusOK || body != "OK" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("/health: %d %q %v, want 200 OK", code, body, h)
	}
	for _, path := range []string{"/health", "/metrics"} {
		if code, _, _ := get(path, "prometheus", "wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong password: %d, want 401", path, code)
		}
		if code, _, _ := get(path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d, want 401", path, code)
		}
	}
	var body string
	testenv.Eventually(ctx, t, 100*time.Millisecond, "DCGM_FI_DEV_FB_TOTAL on the DCGM listener", func() (bool, string) {
		_, body, _ = get("/metrics", "prometheus", "s3cret")
		return strings.Contains(body, "DCGM_FI_DEV_FB_TOTAL{") && strings.Contains(body, "DCGM_FI_DEV_GPU_TEMP{"), body
	})
	var families []string
	for _, l := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
			families = append(families, name)
		}
	}
	if want := []string{"DCGM_FI_DEV_FB_TOTAL gauge", "DCGM_FI_DEV_GPU_TEMP gauge"}; !slices.Equal(families, want) {
		t.Errorf("families %v, want %v", families, want)
	}
	if !strings.Contains(body, "# HELP DCGM_FI_DEV_FB_TOTAL Framebuffer total (in MiB).") {
		t.Errorf("not the file's help:\n%s", body)
	}
	// Plain HTTP to the TLS listener is not served.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + own + "/metrics")
	if err == nil {
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP to the DCGM listener was served: %s", resp.Status)
		}
	}
}

// TestCompatBadCountersFile: a name that is no DCGM field stops the
// exporter before it starts, naming the flag, the file and the line.
func TestCompatBadCountersFile(t *testing.T) {
	t.Parallel()
	counters := filepath.Join(t.TempDir(), "counters.csv")
	if err := os.WriteFile(counters, []byte("DCGM_FI_DEV_GPU_TEMP, gauge, t\n\nDCGM_FI_DEV_FB_TOTALS, gauge, t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out testenv.Log
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := run(ctx, []string{"--web.listen-address=127.0.0.1:0", "--sim.scenario=minimal", "--compat.dcgm.counters-file=" + counters}, &out)
	want := `--compat.dcgm.counters-file: ` + counters + `:3: "DCGM_FI_DEV_FB_TOTALS" is not a DCGM field`
	if code != 2 || !strings.Contains(out.String(), want) {
		t.Errorf("exit code %d, output:\n%s\nwant %q", code, out.String(), want)
	}
}
