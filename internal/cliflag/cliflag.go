// Package cliflag holds the command-line flag types gpulens's commands
// share, so that each is written once: only cmd/ uses it.
package cliflag

import (
	"fmt"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

// DurationValue is a kingpin value whose parse errors name the flag:
// "--sampler.interval: \"5x\" is not a duration (use e.g. 500ms, 1s, 2m)".
type DurationValue struct {
	Name string
	D    *time.Duration
}

// Set implements kingpin.Value.
func (v DurationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("--%s: %q is not a duration (use e.g. 500ms, 1s, 2m)", v.Name, s)
	}
	*v.D = d
	return nil
}

func (v DurationValue) String() string { return v.D.String() }

// Duration declares the duration flag name on app, stored in d, with
// default def (parsed like any value: a bad default fails at Parse).
func Duration(app *kingpin.Application, name, help, def string, d *time.Duration) {
	app.Flag(name, help).Default(def).SetValue(DurationValue{Name: name, D: d})
}
