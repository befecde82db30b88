package cliflagtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag"
)

// recorder is a testing.TB that keeps the errors Check reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// ownBytes is a byte-size parser of its own, as the exporter had.
type ownBytes struct{ b *uint64 }

func (v ownBytes) Set(s string) error {
	n, ok := strings.CutSuffix(s, "GiB")
	if !ok {
		return fmt.Errorf("%q is not a size", s)
	}
	_, err := fmt.Sscan(n, v.b)
	return err
}

func (v ownBytes) String() string { return fmt.Sprint(*v.b) }

// conforming is an application whose flags of every kind use cliflag, on
// the application and on a command with a required flag and argument.
func conforming() *kingpin.Application {
	app := kingpin.New("t", "")
	var d time.Duration
	var b uint64
	var p, q float64
	cliflag.Duration(app, "interval", "", "1s", &d)
	cliflag.Bytes(app, "max-memory", "", "2GiB", &b)
	app.Flag("jitter", "").Default("0.2").Float64()
	app.Flag("name", "").String()
	cmd := app.Command("cost", "")
	cmd.Arg("reports", "").Required().Strings()
	cmd.Flag("target", "").Required().String()
	cliflag.Price(cmd, "cost.gpu-hourly-usd", "", "", &p)
	cliflag.Price(cmd, "gpu-hourly-usd", "", "", &q).Hidden()
	cliflag.Duration(cmd, "timeout", "", "", &d)
	return app
}

func TestCheckPassesCliflagFlags(t *testing.T) {
	r := &recorder{TB: t}
	found := Check(r, conforming)
	if len(r.errs) > 0 {
		t.Errorf("errors on a conforming app: %q", r.errs)
	}
	if want := map[Kind]int{Duration: 2, Bytes: 1, Price: 2}; fmt.Sprint(found) != fmt.Sprint(want) {
		t.Errorf("found %v, want %v", found, want)
	}
}

// Each second spelling of a rule fails Check, naming the flag.
func TestCheckFailsSecondSpellings(t *testing.T) {
	for name, tc := range map[string]struct {
		add  func(app *kingpin.Application)
		want string
	}{
		"kingpin duration": {func(app *kingpin.Application) {
			app.Command("run", "").Flag("warmup", "").Default("0s").Duration()
		}, "run --warmup: declared with kingpin's Duration"},
		"own byte parser": {func(app *kingpin.Application) {
			var b uint64
			app.Flag("vram", "").SetValue(ownBytes{&b})
		}, "--vram: a byte size read by cliflagtest.ownBytes"},
		"price as a float": {func(app *kingpin.Application) {
			app.Command("cost", "").Flag("gpu-hourly-usd", "").Float64()
		}, "cost --gpu-hourly-usd: a GPU-hour price read as *kingpin.float64Value"},
		"a value naming another flag": {func(app *kingpin.Application) {
			var d time.Duration
			app.Flag("linger", "").SetValue(cliflag.DurationValue{Name: "grace", D: &d})
		}, "--linger=5x: error --grace: \"5x\" is not a duration"},
	} {
		t.Run(name, func(t *testing.T) {
			r := &recorder{TB: t}
			Check(r, func() *kingpin.Application {
				app := conforming()
				tc.add(app)
				return app
			})
			if len(r.errs) == 0 || !strings.Contains(strings.Join(r.errs, "\n"), tc.want) {
				t.Errorf("errors %q, want one containing %q", r.errs, tc.want)
			}
		})
	}
}
