// Package cliflag holds the command-line flag types gpulens's commands
// share, so that each rule is written once: a duration, a byte size
// (internal/bytesize's grammar) and a GPU-hour price (internal/pricing's
// bounds), each of whose parse errors names the flag. Only cmd/ uses it;
// cliflagtest checks that every command's flags of these kinds use it.
package cliflag

import (
	"fmt"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/pricing"
)

// Flagger is where a flag is declared: a *kingpin.Application or one of
// its commands (*kingpin.CmdClause).
type Flagger interface {
	Flag(name, help string) *kingpin.FlagClause
}

// declare declares the flag name on app with value v and default def (none
// when empty; parsed like any value: a bad default fails at Parse).
func declare(app Flagger, name, help, def string, v kingpin.Value) *kingpin.FlagClause {
	f := app.Flag(name, help)
	if def != "" {
		f.Default(def)
	}
	f.SetValue(v)
	return f
}

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

// Duration declares the duration flag name on app (or a command), stored
// in d, with default def (none when empty). The returned clause takes
// the flag's other settings (PlaceHolder, Hidden, …).
func Duration(app Flagger, name, help, def string, d *time.Duration) *kingpin.FlagClause {
	return declare(app, name, help, def, DurationValue{Name: name, D: d})
}

// BytesValue is a kingpin value for a byte size in bytesize's grammar
// ("2GiB", "1280MiB", "80GB"; "80G" and "2048" are ambiguous) whose parse
// errors name the flag.
type BytesValue struct {
	Name string
	B    *uint64
}

// Set implements kingpin.Value.
func (v BytesValue) Set(s string) error {
	n, err := bytesize.Parse(s)
	if err != nil {
		return fmt.Errorf("--%s: %w", v.Name, err)
	}
	*v.B = n
	return nil
}

func (v BytesValue) String() string { return bytesize.Format(*v.B) }

// BytesHelp is the grammar a byte-size flag's help ends with.
const BytesHelp = " Units: KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal), in any case."

// Bytes declares the byte-size flag name on app (or a command), stored in
// b, with default def (none when empty); its help gets BytesHelp.
func Bytes(app Flagger, name, help, def string, b *uint64) *kingpin.FlagClause {
	return declare(app, name, help+BytesHelp, def, BytesValue{Name: name, B: b})
}

// PriceValue is a kingpin value for a GPU-hour price in USD: a finite
// number from 0 to pricing.MaxPrice (pricing.CheckPrice), whose errors
// name the flag.
type PriceValue struct {
	Name string
	P    *float64
}

// Set implements kingpin.Value.
func (v PriceValue) Set(s string) error {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("--%s: %q is not a number (USD per GPU-hour, e.g. 2.50)", v.Name, s)
	}
	if err := pricing.CheckPrice(p); err != nil {
		return fmt.Errorf("--%s: %w", v.Name, err)
	}
	*v.P = p
	return nil
}

func (v PriceValue) String() string { return strconv.FormatFloat(*v.P, 'f', -1, 64) }

// Price declares the GPU-hour price flag name on app (or a command),
// stored in p, with default def (none when empty).
func Price(app Flagger, name, help, def string, p *float64) *kingpin.FlagClause {
	return declare(app, name, help, def, PriceValue{Name: name, P: p})
}
