package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestSetWork(t *testing.T) {
	for _, tc := range []struct {
		energy               float64
		tokens               int64
		completed            int
		perJoule, perRequest float64
	}{
		{2100, 4200, 21, 2, 100},
		{0, 4200, 21, 0, 0},
		{50, 0, 0, 0, 0},
	} {
		g := RunGPU{EnergyJoules: tc.energy, OutputTokensPerJoule: 9, EnergyPerRequestJoules: 9}
		g.SetWork(tc.tokens, tc.completed)
		if g.OutputTokensPerJoule != tc.perJoule || g.EnergyPerRequestJoules != tc.perRequest {
			t.Errorf("%+v: %v tokens/J, %v J/request; want %v, %v", tc, g.OutputTokensPerJoule, g.EnergyPerRequestJoules, tc.perJoule, tc.perRequest)
		}
	}
}

func TestAggregateGPU(t *testing.T) {
	dev := func(gpu string, peak, util, power, energy float64) RunGPUDevice {
		return RunGPUDevice{GPU: gpu, UUID: "GPU-" + gpu, PeakMemoryUsedBytes: peak, MeanUtilizationRatio: util, MeanPowerWatts: power, EnergyJoules: energy}
	}
	reps := []Run{
		{Name: "c=1 repeat=1", GPU: &RunGPU{GPUs: []RunGPUDevice{dev("0", 10, 0.4, 200, 600), dev("1", 5, 0.2, 100, 300)},
			PeakMemoryUsedBytes: 14, MeanUtilizationRatio: 0.25, MeanPowerWatts: 300, EnergyJoules: 900, OutputTokensPerJoule: 2, EnergyPerRequestJoules: 30, Samples: 5,
			DurationSeconds: 1.5, EnergyExtrapolatedRatio: 0.6, Warning: "too short"}},
		{Name: "c=1 repeat=2"}, // no exporter reading: left out
		{Name: "c=1 repeat=3", GPU: &RunGPU{GPUs: []RunGPUDevice{dev("0", 12, 0.6, 220, 700)},
			PeakMemoryUsedBytes: 12, MeanUtilizationRatio: 0.75, MeanPowerWatts: 220, EnergyJoules: 700, EnergyFromPower: true,
			OutputTokensPerJoule: 1, EnergyPerRequestJoules: 10, Samples: 3, Error: "scraping: HTTP 500", DurationSeconds: 2.5, EnergyExtrapolatedRatio: 0.1}},
	}
	got := AggregateGPU(reps)
	want := &RunGPU{
		// Means of the repeats (a GPU: of the repeats that have it), the
		// samples a total.
		GPUs:                []RunGPUDevice{dev("0", 11, 0.5, 210, 650), dev("1", 5, 0.2, 100, 300)},
		PeakMemoryUsedBytes: 13, MeanUtilizationRatio: 0.5, MeanPowerWatts: 260, EnergyJoules: 800, EnergyFromPower: true,
		OutputTokensPerJoule: 1.5, EnergyPerRequestJoules: 20, Samples: 8, Error: "c=1 repeat=3: scraping: HTTP 500",
		DurationSeconds: 2, EnergyExtrapolatedRatio: 0.35, Warning: "c=1 repeat=1: too short",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", *got, *want)
	}
	if AggregateGPU([]Run{{Name: "a"}, {Name: "b"}}) != nil {
		t.Error("an aggregate GPU side without any repeat's")
	}
}

func TestResponsesRoundTrip(t *testing.T) {
	rs := []Response{
		{Run: "concurrency=1", Level: 1, Repeat: 1, Index: 0, DatasetRow: 3, ID: "q3", Reference: json.RawMessage(`{"a":[1,2]}`),
			PromptSHA256: "ab", Prompt: "<b>x</b>", Response: "é & <tag>\n", FinishReason: "stop", PromptTokens: 4, OutputTokens: 5},
		{Run: "concurrency=1", Level: 1, Repeat: 1, Index: 1, PromptSHA256: "cd", ErrorClass: ErrHTTP5xx},
	}
	var buf bytes.Buffer
	if err := WriteResponses(&buf, rs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"response":"é & <tag>\n"`) || !strings.Contains(lines[0], `"reference":{"a":[1,2]}`) ||
		lines[1] != `{"run":"concurrency=1","level":1,"repeat":1,"index":1,"prompt_sha256":"cd","response":"","prompt_tokens":0,"output_tokens":0,"error_class":"http_5xx"}` {
		t.Errorf("written:\n%s", buf.String())
	}
	back, err := ReadResponses(strings.NewReader(buf.String() + "\n"))
	if err != nil || !reflect.DeepEqual(back, rs) {
		t.Errorf("read back %+v, %v", back, err)
	}
	if _, err := ReadResponses(strings.NewReader(lines[0] + "\n{bad\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: %v", err)
	}
}
