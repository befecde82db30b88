package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/internal/testenv"
)

func TestSimGPUTieFlags(t *testing.T) {
	t.Parallel()
	app := kingpin.New("test", "")
	f := addSimFlags(app.Command("sim", ""))
	if _, err := app.Parse([]string{"sim"}); err != nil {
		t.Fatal(err)
	}
	if want := (simserver.GPUTie{GPU: "0", Interval: 2 * time.Second, StaleAfter: 30 * time.Second}); f.gpu != want {
		t.Errorf("defaults %+v, want %+v (untied)", f.gpu, want)
	}
	app = kingpin.New("test", "")
	f = addSimFlags(app.Command("sim", ""))
	if _, err := app.Parse([]string{"sim", "--sim.gpu.exporter-url=http://127.0.0.1:9842/metrics", "--sim.gpu=GPU-1",
		"--sim.gpu.pid=4242", "--sim.gpu.poll-interval=500ms", "--sim.gpu.stale-after=5s"}); err != nil {
		t.Fatal(err)
	}
	if want := (simserver.GPUTie{ExporterURL: "http://127.0.0.1:9842/metrics", GPU: "GPU-1", PID: "4242",
		Interval: 500 * time.Millisecond, StaleAfter: 5 * time.Second}); f.gpu != want {
		t.Errorf("tie %+v, want %+v", f.gpu, want)
	}
}

// The GPU tie's errors name its flags, before anything listens.
func TestSimGPUTieErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sim.gpu.exporter-url=exporter:9842"}, `invalid GPU tie: --sim.gpu.exporter-url must be an http(s) URL, got "exporter:9842": scheme "exporter": must be http:// or https://`},
		{[]string{"--sim.gpu.exporter-url=http://127.0.0.1:99999/metrics"}, `invalid GPU tie: --sim.gpu.exporter-url must be an http(s) URL, got "http://127.0.0.1:99999/metrics": port 99999 out of range 1-65535`},
		{[]string{"--sim.gpu.exporter-url=http://127.0.0.1:1/metrics", "--sim.gpu.poll-interval=1ms", "--sim.gpu="},
			"invalid GPU tie: --sim.gpu must name the GPU: its index or UUID\n--sim.gpu.poll-interval must be at least 100ms, got 1ms"},
		{[]string{"--sim.gpu.exporter-url=http://127.0.0.1:1/metrics", "--sim.gpu=0,1,1", "--sim.gpu.pid=4200,"},
			"invalid GPU tie: --sim.gpu must list GPUs by index or UUID, separated by commas, each once: \"1\" twice in \"0,1,1\"\n--sim.gpu.pid must list process ids separated by commas, each once: an empty entry in \"4200,\""},
	} {
		app := kingpin.New("t", "")
		c := simCommand(app)
		if _, err := app.Parse(append([]string{"sim", "--sim.listen-address=127.0.0.1:0"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err == nil || err.Error() != tc.want {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// `gpulens-loadgen sim --sim.gpu.exporter-url` reads the exporter and
// serves the slowdown it sets: 1 + the neighbour's 60 % on GPU 0.
func TestSimTiedToExporter(t *testing.T) {
	t.Parallel()
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE gpulens_gpu_info gauge\ngpulens_gpu_info{gpu=\"0\",uuid=\"GPU-0\"} 1\n"+
			"# TYPE gpulens_process_sm_utilization_ratio gauge\n"+
			"gpulens_process_sm_utilization_ratio{gpu=\"0\",gpu_instance_id=\"\",pid=\"4242\",uuid=\"GPU-0\"} 0.3\n"+
			"gpulens_process_sm_utilization_ratio{gpu=\"0\",gpu_instance_id=\"\",pid=\"5151\",uuid=\"GPU-0\"} 0.6\n")
	}))
	defer exporter.Close()
	app := kingpin.New("t", "")
	c := simCommand(app)
	if _, err := app.Parse([]string{"sim", "--sim.listen-address=127.0.0.1:0", "--sim.ttft=5ms",
		"--sim.gpu.exporter-url=" + exporter.URL + "/metrics", "--sim.gpu.pid=4242", "--sim.gpu.poll-interval=100ms"}); err != nil {
		t.Fatal(err)
	}
	sim := testenv.RunFunc(t, "gpulens-loadgen sim", func(ctx context.Context, w io.Writer) int {
		if err := c.run(ctx, slog.New(slog.NewTextHandler(w, nil))); err != nil {
			fmt.Fprintln(w, err)
			return 1
		}
		return 0
	})
	sim.StopTimeout = time.Minute
	defer func() {
		if err := sim.Stop(); err != nil {
			t.Errorf("sim: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := sim.MustAddress(ctx, t)
	testenv.Eventually(ctx, t, 20*time.Millisecond, "the simulator to serve slowdown 1.6 and neighbour utilisation 0.6", func() (bool, string) {
		body, err := testenv.Scrape(ctx, "http://"+addr+"/metrics", testenv.AcceptText)
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for line := range strings.Lines(string(body)) {
			if strings.HasPrefix(line, "gpulens_sim_slowdown_ratio ") || strings.HasPrefix(line, "gpulens_sim_gpu_neighbour_sm_utilization_ratio ") {
				seen = append(seen, strings.TrimSpace(line))
			}
		}
		return strings.Contains(string(body), "\ngpulens_sim_slowdown_ratio 1.6\n") &&
			strings.Contains(string(body), "\ngpulens_sim_gpu_neighbour_sm_utilization_ratio 0.6\n"), fmt.Sprint(seen)
	})
}
