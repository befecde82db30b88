package cliflag

import (
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    time.Duration
		wantErr string
	}{
		{nil, 2 * time.Second, ""},
		{[]string{"--probe.interval=150ms"}, 150 * time.Millisecond, ""},
		{[]string{"--probe.interval=5x"}, 0, `--probe.interval: "5x" is not a duration`},
		{[]string{"--probe.interval="}, 0, `--probe.interval: "" is not a duration`},
	} {
		app := kingpin.New("t", "")
		var d time.Duration
		Duration(app, "probe.interval", "help", "2s", &d)
		_, err := app.Parse(tc.args)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case d != tc.want:
			t.Errorf("%v: %s, want %s", tc.args, d, tc.want)
		}
	}
}

// A duration flag of a command, without a default, is zero unless given.
func TestDurationOfCommand(t *testing.T) {
	app := kingpin.New("t", "")
	cmd := app.Command("run", "")
	d := time.Minute
	Duration(cmd, "duration", "help", "", &d)
	if _, err := app.Parse([]string{"run"}); err != nil || d != time.Minute {
		t.Errorf("no default: %s, %v; want the variable untouched (1m0s)", d, err)
	}
	if _, err := app.Parse([]string{"run", "--duration=1h"}); err != nil || d != time.Hour {
		t.Errorf("--duration=1h: %s, %v", d, err)
	}
	if _, err := app.Parse([]string{"run", "--duration=soon"}); err == nil || !strings.Contains(err.Error(), `--duration: "soon" is not a duration`) {
		t.Errorf("--duration=soon: %v", err)
	}
}

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    uint64
		wantErr string
	}{
		{nil, 2 << 30, ""},
		{[]string{"--probe.max-memory=1280MiB"}, 1280 << 20, ""},
		{[]string{"--probe.max-memory=80gb"}, 80e9, ""},
		{[]string{"--probe.max-memory=80G"}, 0, `--probe.max-memory: "80G": the unit "G" is ambiguous: write 80GiB (binary) or 80GB (decimal)`},
		{[]string{"--probe.max-memory=1024"}, 0, `--probe.max-memory: "1024" has no unit`},
		{[]string{"--probe.max-memory=lots"}, 0, `--probe.max-memory: "lots" is not a byte size`},
	} {
		app := kingpin.New("t", "")
		var b uint64
		f := Bytes(app, "probe.max-memory", "Memory.", "2GiB", &b)
		_, err := app.Parse(tc.args)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case b != tc.want:
			t.Errorf("%v: %d, want %d", tc.args, b, tc.want)
		}
		if h := f.Model().Help; h != "Memory."+BytesHelp {
			t.Errorf("help %q does not end with the grammar", h)
		}
	}
}

func TestPrice(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    float64
		wantErr string
	}{
		{nil, 0, ""},
		{[]string{"--cost.gpu-hourly-usd=2.5"}, 2.5, ""},
		{[]string{"--cost.gpu-hourly-usd=1000"}, 1000, ""},
		{[]string{"--cost.gpu-hourly-usd=5000"}, 0, "--cost.gpu-hourly-usd: price 5000 is more than 1000 USD per GPU-hour"},
		{[]string{"--cost.gpu-hourly-usd=-1"}, 0, "--cost.gpu-hourly-usd: price -1 must not be negative"},
		{[]string{"--cost.gpu-hourly-usd=NaN"}, 0, "--cost.gpu-hourly-usd: price NaN is not a finite number"},
		{[]string{"--cost.gpu-hourly-usd=$2"}, 0, `--cost.gpu-hourly-usd: "$2" is not a number`},
	} {
		app := kingpin.New("t", "")
		var p float64
		Price(app, "cost.gpu-hourly-usd", "help", "0", &p)
		_, err := app.Parse(tc.args)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case p != tc.want:
			t.Errorf("%v: %g, want %g", tc.args, p, tc.want)
		}
	}
}
