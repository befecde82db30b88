package cudaver

import (
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	for v, want := range map[int]string{12040: "12.4", 13000: "13.0", 11080: "11.8", 12090: "12.9", 12100: "12.10", 0: "", -1: ""} {
		if got := Format(v); got != want {
			t.Errorf("Format(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]int{"12.4": 12040, "12": 12000, " 13.0 ": 13000, "11.8": 11080, "12.10": 12100} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v, want %d", in, got, err, want)
		}
		// What Parse reads, Format writes back (but for a bare major).
		if in != "12" && Format(got) != strings.TrimSpace(in) {
			t.Errorf("Format(Parse(%q)) = %q", in, Format(got))
		}
	}
	for _, in := range []string{"", "twelve", "0.5", "12.4.1", "12.", "100.0", "12.100", "-1.0", "12.-1", "+12.4", "12.+4", ".4"} {
		if v, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, v)
		}
	}
}
