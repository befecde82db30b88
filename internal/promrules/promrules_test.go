package promrules

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

const file = `# head comment
groups:
  - name: g
    interval: 1m
    rules:
      - record: r:x:rate5m
        expr: rate(x[5m])
      - alert: A
        expr: avg_over_time(x[10m]) > 0.5
        for: 15m
        keep_firing_for: 30m
        labels:
          severity: warning
        annotations:
          summary: 'for: {{ $labels.gpu }}'
  - name: h
    rules:
      - alert: B
        expr: up == 0
        for: 5m
      - alert: C
        expr: up == 0
`

// decoded is a rule file as plain data, without the keys of drop.
func decoded(t *testing.T, src []byte, drop ...string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(src, &v); err != nil {
		t.Fatal(err)
	}
	var strip func(v any)
	strip = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range drop {
				delete(x, k)
			}
			for _, c := range x {
				strip(c)
			}
		case []any:
			for _, c := range x {
				strip(c)
			}
		}
	}
	strip(v)
	return v
}

// SetFor changes every alert's for: and nothing else, and names the
// alerts it changed.
func TestSetFor(t *testing.T) {
	t.Parallel()
	var changed []string
	out, err := Rewrite([]byte(file), SetFor(model.Duration(2*time.Second), &changed))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed, []string{"A", "B"}) {
		t.Errorf("changed %q, want A and B", changed)
	}
	if !reflect.DeepEqual(decoded(t, []byte(file), "for"), decoded(t, out, "for")) {
		t.Errorf("more than for: changed:\n%s", out)
	}
	if strings.Count(string(out), "for: 2s") != 2 || !strings.Contains(string(out), "interval: 1m") || !strings.Contains(string(out), "keep_firing_for: 30m") ||
		!strings.Contains(string(out), "# head comment") {
		t.Errorf("rewritten:\n%s", out)
	}
}

// SetIntervals changes the interval of the groups that have one, and
// nothing else.
func TestSetIntervals(t *testing.T) {
	t.Parallel()
	out, err := Rewrite([]byte(file), SetIntervals(model.Duration(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(decoded(t, []byte(file), "interval"), decoded(t, out, "interval")) {
		t.Errorf("more than the intervals changed:\n%s", out)
	}
	if strings.Count(string(out), "interval: ") != 1 || !strings.Contains(string(out), "interval: 1s") || !strings.Contains(string(out), "for: 15m") {
		t.Errorf("rewritten:\n%s", out)
	}
}

func TestScaleExpr(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`predict_linear(gpulens_gpu_memory_free_bytes[30m], 1800) <= 0`, `predict_linear(gpulens_gpu_memory_free_bytes[30s], 30) <= 0`},
		{`time() - gpulens_sampler_last_success_timestamp_seconds > 60`, `time() - gpulens_sampler_last_success_timestamp_seconds > 1`},
		{`x unless x offset 10m`, `x unless x offset 10s`},
		{`max_over_time(rate(x[5m])[1h:1m])`, `max_over_time(rate(x[5s])[1m:1s])`},
		{`time() - x`, `time() - x`},
	}
	for _, tc := range tests {
		got, err := ScaleExpr(tc.in, 60)
		if err != nil || got != tc.want {
			t.Errorf("ScaleExpr(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`timestamp(x) * 2`, `x[7s]`} {
		if got, err := ScaleExpr(bad, 60); err == nil {
			t.Errorf("ScaleExpr(%q) = %q; want an error", bad, got)
		}
	}
}

func TestScale(t *testing.T) {
	t.Parallel()
	out, err := Rewrite([]byte(file), Scale(60))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"interval: 1s", "rate(x[5s])", "avg_over_time(x[10s]) > 0.5", "for: 15s", "keep_firing_for: 30s", "for: 5s", "summary: 'for: {{ $labels.gpu }}'"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("scaled file lacks %q:\n%s", want, out)
		}
	}
	// A duration that does not divide, and an expression that does not
	// parse: both errors, each naming its field.
	bad := "groups:\n  - name: g\n    interval: 7s\n    rules:\n      - record: r\n        expr: rate(x[\n"
	_, err = Rewrite([]byte(bad), Scale(60))
	if err == nil || !strings.Contains(err.Error(), "group g: interval: 7s: 7s is not a whole number of milliseconds once divided by 60") ||
		!strings.Contains(err.Error(), "group g, rule r: expr: ") {
		t.Errorf("err %v", err)
	}
	if _, err := Rewrite([]byte("- a\n"), Scale(60)); err == nil {
		t.Error("a list rewritten as a rule file")
	}
}

func TestCopyFiles(t *testing.T) {
	t.Parallel()
	src, dst := t.TempDir(), t.TempDir()
	in := filepath.Join(src, "a.rules.yml")
	if err := os.WriteFile(in, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	var changed []string
	if err := CopyFiles([]string{in}, dst, SetFor(model.Duration(time.Second), &changed)); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(filepath.Join(dst, "a.rules.yml"))
	if err != nil || strings.Count(string(out), "for: 1s") != 2 || len(changed) != 2 {
		t.Errorf("copy %s, changed %q, %v", out, changed, err)
	}
	if err := CopyFiles([]string{filepath.Join(src, "missing.yml")}, dst, Edit{}); err == nil {
		t.Error("a missing file copied")
	}
}
