package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpulens/gpulens/internal/testenv"
)

// startExporter runs the exporter in-process on a free loopback port and
// returns its address. It stops when the test ends.
func startExporter(t *testing.T, args ...string) string {
	t.Helper()
	p := testenv.RunFunc(t, "gpulens-exporter", func(ctx context.Context, log io.Writer) int {
		return run(ctx, append([]string{"--web.listen-address=127.0.0.1:0"}, args...), log)
	})
	p.StopTimeout = 15 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.MustAddress(ctx, t)
}

func parseScrape(t *testing.T, body io.Reader) map[string]*familyView {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(body)
	if err != nil {
		t.Fatalf("parsing scrape: %v", err)
	}
	out := map[string]*familyView{}
	for name, mf := range mfs {
		fv := &familyView{}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			fv.series = append(fv.series, seriesView{ls, v})
		}
		out[name] = fv
	}
	return out
}

type seriesView struct {
	labels map[string]string
	value  float64
}

type familyView struct{ series []seriesView }

func scrape(t *testing.T, client *http.Client, url string) map[string]*familyView {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return parseScrape(t, resp.Body)
}

// waitUp polls until n GPUs report gpulens_gpu_up 1.
func waitUp(t *testing.T, client *http.Client, url string, n int) map[string]*familyView {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var fams map[string]*familyView
	testenv.Eventually(ctx, t, 50*time.Millisecond, fmt.Sprintf("%d GPUs with gpulens_gpu_up 1", n), func() (bool, string) {
		fams = scrape(t, client, url)
		up := 0
		if f := fams["gpulens_gpu_up"]; f != nil {
			for _, s := range f.series {
				if s.value == 1 {
					up++
				}
			}
		}
		return up == n, fmt.Sprintf("%d up", up)
	})
	return fams
}

// waitFamily scrapes url until the family name has a series, and returns
// that scrape.
func waitFamily(t *testing.T, url, name string, timeout time.Duration) map[string]*familyView {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var fams map[string]*familyView
	testenv.Eventually(ctx, t, 50*time.Millisecond, "a series of "+name+" at "+url, func() (bool, string) {
		fams = scrape(t, http.DefaultClient, url)
		f := fams[name]
		return f != nil && len(f.series) > 0, fmt.Sprintf("%d families, none named %s with a series", len(fams), name)
	})
	return fams
}

func TestDisabledCollector(t *testing.T) {
	t.Parallel()
	addr := startExporter(t, "--sim.scenario=minimal", "--sampler.interval=100ms", "--no-collector.power", "--no-collector.xid")
	fams := waitUp(t, http.DefaultClient, "http://"+addr+"/metrics", 1)
	if fams["gpulens_gpu_power_watts"] != nil {
		t.Errorf("power metrics served with --no-collector.power")
	}
	if fams["gpulens_gpu_memory_used_bytes"] == nil {
		t.Errorf("memory metrics missing")
	}
	for _, s := range fams["gpulens_scrape_collector_success"].series {
		if s.labels["collector"] == "power" {
			t.Errorf("disabled collector power still reports success")
		}
	}
}

// writeTLSConfig writes a self-signed certificate for 127.0.0.1 and a web
// config with one basic-auth user.
func writeTLSConfig(t *testing.T, user, password string) (configPath string, pool *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "gpulens test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write("key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	write("web.yml", fmt.Appendf(nil, "tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n",
		filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), user, hash))
	return filepath.Join(dir, "web.yml"), pool
}

func TestTLSAndBasicAuth(t *testing.T) {
	t.Parallel()
	cfg, pool := writeTLSConfig(t, "prometheus", "s3cret")
	addr := startExporter(t, "--sim.scenario=minimal", "--web.config.file="+cfg)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	get := func(user, pass string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("HTTPS request: %v", err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if resp := get("prometheus", "s3cret"); resp.StatusCode != http.StatusOK {
		t.Errorf("right password: %s, want 200", resp.Status)
	} else if body, _ := io.ReadAll(resp.Body); !strings.Contains(string(body), "gpulens_gpu_up{") {
		t.Errorf("authorised scrape lacks gpulens_gpu_up")
	}
	if resp := get("prometheus", "wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password: %s, want 401", resp.Status)
	}
	if resp := get("", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no credentials: %s, want 401", resp.Status)
	}
	// Plain HTTP to the TLS port must not be served.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err == nil {
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP to the TLS port was served: %s", resp.Status)
		}
	}
	// An untrusted certificate is rejected by a verifying client.
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get("https://" + addr + "/metrics"); err == nil {
		t.Errorf("a client without the CA accepted the self-signed certificate")
	}
}

func TestBadInputNamesTheCulprit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	badScenario := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(badScenario, []byte("name: x\ndevices:\n  - count: 2\n    modle: h100-sxm5-80gb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"zero interval", []string{"--sampler.interval=0s"}, 2, []string{"--sampler.interval"}},
		{"interval below the floor", []string{"--sampler.interval=1ns"}, 2, []string{"--sampler.interval", "at least 100ms", "1ns"}},
		{"bad duration", []string{"--sampler.device-timeout=soon"}, 2, []string{"sampler.device-timeout"}},
		{"unknown collector", []string{"--collector.nonexistent"}, 2, []string{"collector.nonexistent"}},
		{"relative telemetry path", []string{"--web.telemetry-path=metrics"}, 2, []string{"--web.telemetry-path"}},
		{"missing scenario file", []string{"--sim.scenario=" + filepath.Join(dir, "nope.yaml")}, 1, []string{"--sim.scenario", "nope.yaml"}},
		{"scenario with unknown field", []string{"--sim.scenario=" + badScenario}, 1, []string{"fleet.yaml:4", "modle"}},
		{"bad web config", []string{"--sim.scenario=minimal", "--web.config.file=" + filepath.Join(dir, "missing-web.yml")}, 2, []string{"missing-web.yml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out testenv.Log
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code := run(ctx, append([]string{"--web.listen-address=127.0.0.1:0"}, tc.args...), &out)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("message does not name %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestSimulatedTenantsCarryPods checks that a simulated fleet's tenants stand
// in for procfs and the kubelet: processes get names and pods, and GPUs
// their pod allocations.
func TestSimulatedTenantsCarryPods(t *testing.T) {
	t.Parallel()
	addr := startExporter(t, "--sim.scenario=noisy-neighbour", "--sampler.interval=100ms")
	waitUp(t, http.DefaultClient, "http://"+addr+"/metrics", 2)
	fams := waitFamily(t, "http://"+addr+"/metrics", "gpulens_process_memory_used_bytes", 10*time.Second)
	found := false
	for _, s := range fams["gpulens_process_memory_used_bytes"].series {
		if s.labels["pid"] == "4242" {
			found = true
			if s.labels["namespace"] != "serving" || s.labels["pod"] != "vllm-llama-0" || s.labels["container"] != "vllm" || s.labels["process_name"] != "python3" {
				t.Errorf("simulated vLLM process labels: %v", s.labels)
			}
		}
	}
	if !found {
		t.Errorf("simulated vLLM process (pid 4242) not exported")
	}
	alloc := false
	for _, s := range fams["gpulens_gpu_allocation_info"].series {
		if s.labels["pod"] == "vllm-llama-0" && s.labels["gpu"] == "0" {
			alloc = true
		}
	}
	if !alloc {
		t.Errorf("no gpulens_gpu_allocation_info for the simulated vLLM pod on GPU 0")
	}
}

// runUntilExit runs the exporter without ever cancelling it and returns its
// exit code and output; the exporter must exit by itself.
func runUntilExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	logs := &testenv.Log{}
	done := make(chan int, 1)
	go func() { done <- run(context.Background(), args, logs) }()
	select {
	case code := <-done:
		return code, logs.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("exporter still running 20 s after a start-up error; output:\n%s", logs.String())
		return 0, ""
	}
}

// TestListenErrorExitsAtOnce: a port in use or an invalid port is logged,
// naming the flag, and the exporter exits 1 without waiting for a signal.
func TestListenErrorExitsAtOnce(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name, addr string
		want       []string
	}{
		{"port in use", busy.Addr().String(), []string{"--web.listen-address=" + busy.Addr().String(), "address already in use"}},
		{"invalid port", "127.0.0.1:99999", []string{"--web.listen-address=127.0.0.1:99999", "invalid port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runUntilExit(t, "--sim.scenario=minimal", "--web.listen-address="+tc.addr)
			if code != 1 {
				t.Errorf("exit code %d, want 1; output:\n%s", code, out)
			}
			if !strings.Contains(out, "level=ERROR") {
				t.Errorf("the error was not logged:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestSamplerIntervalFloor: intervals below 100ms are refused with a
// message naming the flag and the minimum; 100ms is accepted.
func TestSamplerIntervalFloor(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1ns", "1ms", "99ms", "-1s"} {
		var out testenv.Log
		if _, err := parseFlags([]string{"--sampler.interval=" + v}, &out); err == nil {
			t.Errorf("--sampler.interval=%s accepted", v)
		} else if msg := err.Error(); !strings.Contains(msg, "--sampler.interval") || !strings.Contains(msg, "at least 100ms") || !strings.Contains(msg, v) {
			t.Errorf("--sampler.interval=%s: message %q does not name the flag, the minimum and the value", v, msg)
		}
	}
	if o, err := parseFlags([]string{"--sampler.interval=100ms"}, io.Discard); err != nil || o.interval != 100*time.Millisecond {
		t.Errorf("--sampler.interval=100ms: %v, %v", o, err)
	}
}

// TestMetricsMethods: /metrics answers GET and HEAD; other methods get 405
// with an Allow header.
func TestMetricsMethods(t *testing.T) {
	t.Parallel()
	addr := startExporter(t, "--sim.scenario=minimal")
	url := "http://" + addr + "/metrics"
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodTrace, http.MethodOptions} {
		req, _ := http.NewRequest(m, url, strings.NewReader("x=1"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %s, Allow %q; want 405 and \"GET, HEAD\"", m, resp.Status, resp.Header.Get("Allow"))
		}
		if strings.Contains(string(body), "gpulens_gpu_up") {
			t.Errorf("%s served the metrics", m)
		}
	}
	resp, err := http.Head(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength <= 0 {
		t.Errorf("HEAD: %s, Content-Length %d; want 200 and the body's length", resp.Status, resp.ContentLength)
	}
	if fams := scrape(t, http.DefaultClient, url); fams["gpulens_gpu_up"] == nil {
		t.Errorf("GET lacks gpulens_gpu_up")
	}
}

// shortTimeouts shortens the HTTP server's timeouts for one test; call it
// before startExporter (the restore then runs after the exporter stopped).
func shortTimeouts(t *testing.T, read, idle time.Duration) {
	t.Helper()
	oldRead, oldWrite, oldIdle := readTimeout, writeTimeout, idleTimeout
	readTimeout, idleTimeout = read, idle
	t.Cleanup(func() { readTimeout, writeTimeout, idleTimeout = oldRead, oldWrite, oldIdle })
}

// promiseBody opens a connection and sends a request header announcing a
// body that never comes.
func promiseBody(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\n", path, addr); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitClosed reads from c until the server closes it; the deadline is only
// a bound for a broken server.
func waitClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("%s: the server did not close the connection: %v", what, err)
	}
}

// TestPromisedBodiesDoNotStarveScrapes: more connections than
// --web.max-requests send a request header promising a body and never send
// it. Each is answered (the exposition does not wait for the body) and
// closed; a real scrape succeeds meanwhile. On another path, where the
// handler does not refuse the body, the read timeout closes the connection.
func TestPromisedBodiesDoNotStarveScrapes(t *testing.T) {
	// Serial: shortTimeouts changes package variables.
	shortTimeouts(t, 300*time.Millisecond, time.Minute)
	const maxRequests = 3
	addr := startExporter(t, "--sim.scenario=minimal", fmt.Sprintf("--web.max-requests=%d", maxRequests))
	// One after the other, so that the limit is never legitimately reached;
	// each stays open.
	var stalled []net.Conn
	for i := range maxRequests + 2 {
		c := promiseBody(t, addr, "/metrics")
		stalled = append(stalled, c)
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stalled connection %d got no answer: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !resp.Close || !strings.Contains(string(body), "gpulens_gpu_up{") {
			t.Errorf("stalled connection %d: %s, close %v, %d bytes; want 200 with the metrics, then close", i, resp.Status, resp.Close, len(body))
		}
	}
	// The stalled clients have not closed their connections: a real scrape
	// still gets a slot.
	if fams := scrape(t, http.DefaultClient, "http://"+addr+"/metrics"); fams["gpulens_gpu_up"] == nil {
		t.Errorf("real scrape lacks gpulens_gpu_up")
	}
	for i, c := range stalled {
		waitClosed(t, c, fmt.Sprintf("stalled /metrics connection %d", i))
	}
	// /-/healthy does not refuse bodies: net/http waits for the promised
	// body before answering, until the read timeout.
	waitClosed(t, promiseBody(t, addr, "/-/healthy"), "stalled /-/healthy connection")
}

// TestIdleConnectionsAreClosed: a keep-alive connection that carries no
// further request is closed after the idle timeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	// Serial: shortTimeouts changes package variables.
	shortTimeouts(t, 30*time.Second, 200*time.Millisecond)
	addr := startExporter(t, "--sim.scenario=minimal")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("%s, close %v; want 200 on a kept-alive connection", resp.Status, resp.Close)
	}
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection: read %d bytes, %v; want EOF (closed by the server)", n, err)
	}
}

// TestHTTPServerTimeouts: every timeout of the server is set.
func TestHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := newHTTPServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 || d > 2*time.Minute {
			t.Errorf("%s = %s, want between 0 and 2m", name, d)
		}
	}
	if srv.IdleTimeout < time.Minute {
		t.Errorf("IdleTimeout %s is shorter than a 60 s scrape interval: Prometheus would reconnect on every scrape", srv.IdleTimeout)
	}
}
