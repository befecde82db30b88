package promtext

import (
	"reflect"
	"strings"
	"testing"
)

func TestValueAndLabels(t *testing.T) {
	fams, err := Parse(strings.NewReader(`# TYPE g gauge
g{gpu="0",uuid="GPU-a"} 1.5
g{gpu="1",uuid="GPU-b"} NaN
g{gpu="2",uuid="GPU-c"} +Inf
g{gpu="3",uuid="GPU-d"} -Inf
# TYPE c counter
c_total 7
u 3
# TYPE h histogram
h_bucket{le="+Inf"} 1
h_sum 2
h_count 1
"ö_utf8" 4
`))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		v  float64
		ok bool
	}
	var gs []got
	for _, m := range fams["g"].GetMetric() {
		v, ok := Value(m)
		gs = append(gs, got{v, ok})
	}
	if want := []got{{1.5, true}, {0, false}, {0, false}, {0, false}}; !reflect.DeepEqual(gs, want) {
		t.Errorf("gauge values %v, want %v", gs, want)
	}
	if l := Labels(fams["g"].GetMetric()[1]); !reflect.DeepEqual(l, map[string]string{"gpu": "1", "uuid": "GPU-b"}) {
		t.Errorf("labels %v", l)
	}
	for name, want := range map[string]got{"c_total": {7, true}, "u": {3, true}, "h": {0, false}, "ö_utf8": {4, true}} {
		f := fams[name]
		if f == nil {
			t.Errorf("no family %s in %v", name, fams)
			continue
		}
		if v, ok := Value(f.GetMetric()[0]); (got{v, ok}) != want {
			t.Errorf("%s: Value = %v, %v, want %v", name, v, ok, want)
		}
	}
}

func TestParseError(t *testing.T) {
	if _, err := Parse(strings.NewReader("g{gpu=\"0\" 1\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("err = %v", err)
	}
}
