// Package cliflagtest checks, in each command's tests, that every flag of
// a kind cliflag has a rule for uses that rule: a duration, byte-size or
// GPU-hour price given to any of gpulens's programs is read the same way
// and rejected with a message naming the flag. A flag declared another
// way (kingpin's own Duration, a second byte-size parser, a price read
// with Float64) fails the command's test.
package cliflagtest

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/cliflag"
)

// Kind is the rule a flag's values follow.
type Kind string

// The kinds of flag cliflag has a rule for.
const (
	Duration Kind = "duration"
	Bytes    Kind = "byte size"
	Price    Kind = "GPU-hour price"
)

// Flag is one flag of a program.
type Flag struct {
	// Command is the command path the flag belongs to (empty: the
	// application's own flag).
	Command []string
	Model   *kingpin.FlagModel
	// Kind is the rule the flag's value follows ("" for none of cliflag's).
	Kind Kind
	// Problem says why the flag breaks its rule ("" when it does not).
	Problem string
}

// Name is the flag as written on the command line, with its command.
func (f Flag) Name() string {
	return strings.TrimSpace(strings.Join(f.Command, " ") + " --" + f.Model.Name)
}

// PriceFlag reports whether a flag's name makes it a GPU-hour price.
func PriceFlag(name string) bool { return strings.HasSuffix(name, "hourly-usd") }

// Flags lists every flag of the application and of its commands (at any
// depth), with its kind and, for a flag declared outside cliflag, what is
// wrong with it. Classifying a flag may set its value: use a fresh app.
func Flags(app *kingpin.Application) []Flag {
	out := all(app)
	for i := range out {
		out[i].Kind, out[i].Problem = classify(out[i].Model)
	}
	return out
}

// all lists every flag of the application and of its commands, unclassified.
func all(app *kingpin.Application) []Flag {
	var out []Flag
	var walk func(path []string, flags []*kingpin.FlagModel, cmds []*kingpin.CmdModel)
	walk = func(path []string, flags []*kingpin.FlagModel, cmds []*kingpin.CmdModel) {
		for _, m := range flags {
			out = append(out, Flag{Command: path, Model: m})
		}
		for _, c := range cmds {
			walk(append(slices.Clone(path), c.Name), c.Flags, c.Commands)
		}
	}
	m := app.Model()
	walk(nil, m.Flags, m.Commands)
	return out
}

func classify(m *kingpin.FlagModel) (Kind, string) {
	switch m.Value.(type) {
	case cliflag.DurationValue:
		return Duration, ""
	case cliflag.BytesValue:
		return Bytes, ""
	case cliflag.PriceValue:
		return Price, ""
	}
	if PriceFlag(m.Name) {
		return Price, fmt.Sprintf("a GPU-hour price read as %T: declare it with cliflag.Price (pricing.CheckPrice's bounds, errors naming the flag)", m.Value)
	}
	if fmt.Sprintf("%T", m.Value) == "*kingpin.durationValue" {
		return Duration, "declared with kingpin's Duration, whose errors do not name the flag: declare it with cliflag.Duration"
	}
	// A value of another type that reads "2GiB" and rejects a word is a
	// second byte-size parser; one that reads "90s" a second duration
	// parser.
	v := m.Value
	if v.Set("2GiB") == nil && v.Set("lots") != nil {
		return Bytes, fmt.Sprintf("a byte size read by %T: declare it with cliflag.Bytes (internal/bytesize's grammar)", v)
	}
	if v.Set("90s") == nil && v.Set("lots") != nil {
		return Duration, fmt.Sprintf("a duration read by %T: declare it with cliflag.Duration", v)
	}
	return "", ""
}

// A Case is one value given to every flag of a kind: want is what the
// one rule reads (a string of the flag's Value) or, when wantErr is set,
// that it is rejected with a message naming the flag and containing
// wantErr.
type Case struct {
	Value, Want, WantErr string
}

// cases are the values every flag of each kind is given (read only).
var cases = map[Kind][]Case{
	Duration: {
		{Value: "90s", Want: (90 * time.Second).String()},
		{Value: "1h30m", Want: (90 * time.Minute).String()},
		{Value: "5x", WantErr: `"5x" is not a duration`},
		{Value: "10", WantErr: `"10" is not a duration`},
	},
	Bytes: {
		{Value: "2GiB", Want: bytesize.Format(2 << 30)},
		{Value: "1280mib", Want: bytesize.Format(1280 << 20)},
		{Value: "80GB", Want: bytesize.Format(80e9)},
		{Value: "80G", WantErr: `the unit "G" is ambiguous`},
		{Value: "1024", WantErr: `"1024" has no unit`},
		{Value: "lots", WantErr: `"lots" is not a byte size`},
	},
	Price: {
		{Value: "2.5", Want: "2.5"},
		{Value: "1000", Want: "1000"},
		{Value: "5000", WantErr: "price 5000 is more than 1000 USD per GPU-hour"},
		{Value: "-1", WantErr: "price -1 must not be negative"},
		{Value: "Inf", WantErr: "price +Inf is not a finite number"},
		{Value: "$2", WantErr: `"$2" is not a number`},
	},
}

// Check fails t for every flag of the application newApp builds that is
// a duration, byte size or GPU-hour price declared outside cliflag, and
// gives each such flag, on the program's command line, every value of
// cases: what the one rule reads must be stored, what it rejects must be
// rejected with an error naming the flag. newApp must return a fresh
// application each call; it returns the number of flags checked per
// kind, so a test can say it found the ones it knows.
func Check(t testing.TB, newApp func() *kingpin.Application) map[Kind]int {
	t.Helper()
	found := map[Kind]int{}
	for _, f := range Flags(newApp()) {
		if f.Kind == "" {
			continue
		}
		found[f.Kind]++
		if f.Problem != "" {
			t.Errorf("%s: %s", f.Name(), f.Problem)
			continue
		}
		for _, c := range cases[f.Kind] {
			app := newApp()
			app.UsageWriter(io.Discard)
			app.ErrorWriter(io.Discard)
			args := append(commandLine(app, f.Command), "--"+f.Model.Name+"="+c.Value)
			_, err := app.Parse(args)
			if c.WantErr != "" {
				if err == nil || !strings.Contains(err.Error(), "--"+f.Model.Name) || !strings.Contains(err.Error(), c.WantErr) {
					t.Errorf("%s=%s: error %v, want one naming the flag and containing %q", f.Name(), c.Value, err, c.WantErr)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s=%s: %v", f.Name(), c.Value, err)
				continue
			}
			if got := value(app, f).String(); got != c.Want {
				t.Errorf("%s=%s: read as %s, want %s", f.Name(), c.Value, got, c.Want)
			}
		}
	}
	return found
}

// commandLine is the shortest command line that selects the command path
// (an application's flag: its first command, if it has any) and parses:
// its required flags and arguments given a placeholder.
func commandLine(app *kingpin.Application, path []string) []string {
	m := app.Model()
	flags, cmds, positional := m.Flags, m.Commands, m.Args
	var args []string
	required := func() {
		for _, f := range flags {
			if f.Required {
				args = append(args, "--"+f.Name+"=x")
			}
		}
	}
	required()
	if len(path) == 0 {
		// An application with commands parses only with one.
		for _, c := range cmds {
			if c.Name != "help" {
				path = []string{c.Name}
				break
			}
		}
	}
	for _, name := range path {
		for _, c := range cmds {
			if c.Name == name {
				flags, cmds, positional = c.Flags, c.Commands, c.Args
				break
			}
		}
		args = append(args, name)
		required()
	}
	for _, a := range positional {
		if a.Required {
			args = append(args, "x")
		}
	}
	return args
}

// value is the flag f's value in app.
func value(app *kingpin.Application, f Flag) kingpin.Value {
	for _, g := range all(app) {
		if slices.Equal(g.Command, f.Command) && g.Model.Name == f.Model.Name {
			return g.Model.Value
		}
	}
	panic("flag " + f.Name() + " vanished")
}
