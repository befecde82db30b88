package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// TestHelpShowsNoValueAsDefault (issue 29 item 7): `run --help` showed
// --exporter.gpus=0,1, which reads as the default (it is every GPU). No
// flag without a default may show a value in its place: its placeholder
// is a word in capitals (or a quoted form), and --exporter.gpus says
// what it is when unset.
func TestHelpShowsNoValueAsDefault(t *testing.T) {
	for _, name := range []string{"run", "sweep"} {
		app := kingpin.New("gpulens-loadgen", "")
		var out bytes.Buffer
		app.UsageWriter(&out).Terminate(nil)
		runCommand(app)
		sweepCommand(app)
		if _, err := app.Parse([]string{"help", name}); err != nil {
			t.Fatal(err)
		}
		help := strings.Join(strings.Fields(out.String()), " ") // lines wrapped
		if !strings.Contains(help, "--exporter.gpus=LIST") || !strings.Contains(help, "every GPU the exporter reports") {
			t.Errorf("%s --help: --exporter.gpus shown as %q", name, regexp.MustCompile(`--exporter\.gpus=\S+`).FindString(help))
		}
		for _, f := range app.GetCommand(name).Model().Flags {
			if f.Default == nil && f.PlaceHolder != "" && regexp.MustCompile(`^[0-9]`).MatchString(f.PlaceHolder) {
				t.Errorf("%s --%s: placeholder %q reads as a default", name, f.Name, f.PlaceHolder)
			}
		}
	}
}
