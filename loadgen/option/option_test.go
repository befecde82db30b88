package option

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"testing"
)

var flags = map[Name]string{"Concurrency": "--concurrency", "Duration": "--duration", "Requests": "--requests"}

func spell(n Name) string { return flags[n] }

func TestErrorText(t *testing.T) {
	err := Errorf("%s must be at least 1, got %d", Name("Concurrency"), 0)
	if got, want := err.Error(), "Concurrency must be at least 1, got 0"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := Rename(err, spell).Error(), "--concurrency must be at least 1, got 0"; got != want {
		t.Errorf("renamed = %q, want %q", got, want)
	}
	var oe *Error
	if !errors.As(err, &oe) || !reflect.DeepEqual(oe.Options(), []Name{"Concurrency"}) {
		t.Errorf("Options() = %v", oe.Options())
	}
}

func TestRenameNested(t *testing.T) {
	inner := Errorf("set %s or %s", Name("Duration"), Name("Requests"))
	unknown := Errorf("%s %q: bad", Name("Other"), "x")
	wrapped := fmt.Errorf("level 2: %w", errors.Join(inner, unknown))
	got := Rename(wrapped, spell)
	if want := "level 2: set --duration or --requests\nOther \"x\": bad"; got.Error() != want {
		t.Errorf("renamed = %q, want %q", got.Error(), want)
	}
	if !errors.Is(got, inner) {
		t.Error("the renamed error no longer wraps the original")
	}
	outer := Errorf("%s: %w", Name("Concurrency"), inner)
	if want := "--concurrency: set --duration or --requests"; Rename(outer, spell).Error() != want {
		t.Errorf("renamed = %q, want %q", Rename(outer, spell).Error(), want)
	}
}

func TestWraps(t *testing.T) {
	err := Errorf("%s: %w", Name("Requests"), fs.ErrNotExist)
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(Rename(err, spell), fs.ErrNotExist) {
		t.Errorf("%v does not wrap fs.ErrNotExist", err)
	}
	plain := errors.New("no options")
	if Rename(plain, spell) != plain || Rename(nil, spell) != nil { //nolint:errorlint // the very value, not a match
		t.Error("Rename changed an error without options")
	}
}
