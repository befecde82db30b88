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
