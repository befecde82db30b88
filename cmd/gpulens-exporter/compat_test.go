package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
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
