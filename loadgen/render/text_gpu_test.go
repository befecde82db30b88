package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestWriteGPUAndManifest(t *testing.T) {
	d := &report.Document{
		Metadata: report.Metadata{Manifest: &report.Manifest{ServerVersion: "0.11.0", SettingsHash: "f00d"}},
		Runs: []report.Run{
			{Name: "concurrency=1", GPU: &report.RunGPU{GPUs: make([]report.RunGPUDevice, 2), PeakMemoryUsedBytes: 3 << 30, MeanUtilizationRatio: 0.425,
				MeanPowerWatts: 512.5, EnergyJoules: 2100, OutputTokensPerJoule: 2, EnergyPerRequestJoules: 100}},
			{Name: "concurrency=2"},
			{Name: "concurrency=4", GPU: &report.RunGPU{GPUs: make([]report.RunGPUDevice, 1), EnergyJoules: 2500, EnergyFromPower: true, Error: "scraping x: HTTP 500"}},
		},
	}
	var buf bytes.Buffer
	writeGPU(&buf, d)
	writeManifest(&buf, d)
	want := `
            run  GPUs  peak VRAM GiB  util %  power W  energy J  out tok/J   J/req
  concurrency=1     2           3.00    42.5    512.5    2100.0      2.000  100.00
  concurrency=4     1           0.00     0.0      0.0   2500.0*      0.000    0.00
NOTE: concurrency=4: energy marked * is mean power × duration: a GPU had no energy counter
NOTE: concurrency=4: GPU exporter: scraping x: HTTP 500
server version 0.11.0, model revision (unknown), settings hash f00d
`
	if got := buf.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", strings.ReplaceAll(got, " ", "·"), strings.ReplaceAll(want, " ", "·"))
	}
	// Neither GPU side nor manifest: nothing.
	buf.Reset()
	none := &report.Document{Runs: []report.Run{{Name: "r"}}}
	writeGPU(&buf, none)
	writeManifest(&buf, none)
	if buf.Len() != 0 {
		t.Errorf("wrote %q", buf.String())
	}
}
