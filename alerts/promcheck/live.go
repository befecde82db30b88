package promcheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"time"
)

// Binaries are the paths of the built gpulens commands.
type Binaries struct {
	Exporter, Loadgen string
}

// BuildBinaries builds gpulens-exporter and gpulens-loadgen from the module
// at root into dir with the go command.
func BuildBinaries(ctx context.Context, root, dir string) (Binaries, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/gpulens-exporter", "./cmd/gpulens-loadgen")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("go build ./cmd/gpulens-exporter ./cmd/gpulens-loadgen: %w\n%s", err, out)
	}
	return BinariesIn(dir), nil
}

// BinariesIn names the commands in dir (the bin folder of `make build`).
func BinariesIn(dir string) Binaries {
	return Binaries{Exporter: filepath.Join(dir, "gpulens-exporter"), Loadgen: filepath.Join(dir, "gpulens-loadgen")}
}

// syncBuffer collects a process's log output for concurrent reading.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a started command whose log is watched for its address.
type process struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

func start(ctx context.Context, bin string, args ...string) (*process, error) {
	p := &process{log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop interrupts the process and waits for it.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// address waits until the log has a line matching re (whose first group is
// the address) and returns the address.
func (p *process) address(ctx context.Context, re *regexp.Regexp) (string, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := re.FindStringSubmatch(p.log.String()); m != nil {
			return m[1], nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: no address in its log (%w):\n%s", p.cmd.Path, ctx.Err(), p.log.String())
		case <-p.done:
			return "", fmt.Errorf("%s exited before listening:\n%s", p.cmd.Path, p.log.String())
		case <-tick.C:
		}
	}
}

var (
	listeningRe = regexp.MustCompile(`msg="Listening on" address=([0-9.:\[\]]+)`)
	simServerRe = regexp.MustCompile(`msg="simulated inference server listening" address=([0-9.:\[\]]+)`)
)

// Formats to ask for: the text format, or the protobuf format Prometheus
// asks for when it scrapes native histograms (only that format carries
// them). Known.AddExposition parses both.
const (
	acceptText     = "text/plain;version=0.0.4"
	acceptProtobuf = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
)

func get(ctx context.Context, url, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	return body, nil
}

// ScrapeExporter runs the exporter on a simulated scenario (a built-in name
// or a YAML file) with the probe on, lets it sample for settle and returns
// one scrape. The probe's first run starts at once.
func ScrapeExporter(ctx context.Context, bin, scenario string, settle time.Duration) ([]byte, error) {
	p, err := start(ctx, bin, "--sim.scenario="+scenario, "--web.listen-address=127.0.0.1:0", "--sampler.interval=100ms",
		"--collector.probe", "--collector.probe.interval=1m")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	addr, err := p.address(ctx, listeningRe)
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	body, err := get(ctx, "http://"+addr+"/metrics", acceptText)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", scenario, err)
	}
	return body, nil
}

// ScrapeLoadgen starts the simulated inference server, runs the load
// generator against it and scrapes the load generator's live metrics once
// requests have finished.
func ScrapeLoadgen(ctx context.Context, bin string, settle time.Duration) ([]byte, error) {
	sim, err := start(ctx, bin, "sim", "--sim.listen-address=127.0.0.1:0", "--sim.model=m",
		"--sim.ttft=20ms", "--sim.itl=2ms", "--sim.error-rate=0.1")
	if err != nil {
		return nil, err
	}
	defer sim.stop()
	simAddr, err := sim.address(ctx, simServerRe)
	if err != nil {
		return nil, err
	}
	run, err := start(ctx, bin, "run", "--web.listen-address=127.0.0.1:0", "--target=http://"+simAddr+"/v1",
		"--model=m", "--concurrency=4", "--duration=30s", "--output-tokens=fixed:8", "--input-tokens=fixed:16",
		"--cost.gpu-hourly-usd=2.5")
	if err != nil {
		return nil, err
	}
	defer run.stop()
	addr, err := run.address(ctx, listeningRe)
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	// As Prometheus scrapes it (deploy/prometheus/prometheus.yml): native
	// histograms included.
	return get(ctx, "http://"+addr+"/metrics", acceptProtobuf)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
