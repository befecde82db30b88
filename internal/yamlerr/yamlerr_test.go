package yamlerr

import (
	"errors"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestError(t *testing.T) {
	tests := []struct {
		e    Error
		want string
	}{
		{Error{Source: "s.yaml", Line: 12, Path: "devices[1].util.period", Msg: "must be positive"}, "s.yaml:12: devices[1].util.period: must be positive"},
		{Error{Source: "s.yaml", Path: "devices", Msg: "missing"}, "s.yaml: devices: missing"},
		{Error{Source: "prices.yaml", Line: 3, Msg: "invalid YAML: did not find expected key"}, "prices.yaml:3: invalid YAML: did not find expected key"},
		{Error{Source: "prices.yaml", Msg: "empty price file"}, "prices.yaml: empty price file"},
	}
	for _, tc := range tests {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestSplitLine(t *testing.T) {
	tests := []struct {
		msg  string
		line int
		rest string
	}{
		{"yaml: line 3: did not find expected key", 3, "did not find expected key"},
		{"line 5: cannot unmarshal !!str `abc` into float64", 5, "cannot unmarshal !!str `abc` into float64"},
		{"yaml: mapping values are not allowed in this context", 0, "mapping values are not allowed in this context"},
		{"yaml: line 12: found character that cannot start any token (at line 13)", 12, "found character that cannot start any token (at line 13)"},
		{"", 0, ""},
	}
	for _, tc := range tests {
		line, rest := SplitLine(tc.msg)
		if line != tc.line || rest != tc.rest {
			t.Errorf("SplitLine(%q) = %d, %q; want %d, %q", tc.msg, line, rest, tc.line, tc.rest)
		}
	}
}

// TestSplitLineDecoder: the decoder's own messages, syntax and type errors.
func TestSplitLineDecoder(t *testing.T) {
	var v any
	err := yaml.Unmarshal([]byte("a: 1\nb: [\n"), &v)
	if err == nil {
		t.Fatal("want a syntax error")
	}
	if line, rest := SplitLine(err.Error()); line == 0 || rest == "" || rest == err.Error() {
		t.Errorf("syntax error %q: SplitLine = %d, %q", err, line, rest)
	}
	var typed struct{ N int }
	err = yaml.Unmarshal([]byte("\n\nn: abc\n"), &typed)
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) != 1 {
		t.Fatalf("want one type error, got %v", err)
	}
	if line, rest := SplitLine(te.Errors[0]); line != 3 || rest != "cannot unmarshal !!str `abc` into int" {
		t.Errorf("type error %q: SplitLine = %d, %q", te.Errors[0], line, rest)
	}
}
