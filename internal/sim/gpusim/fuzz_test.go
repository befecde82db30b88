package gpusim

import (
	"os"
	"path/filepath"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, name := range BuiltinNames() {
		data, _ := builtinYAML(name)
		f.Add(data)
	}
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if sc.DeviceCount() < 1 || sc.DeviceCount() > maxDevices {
			t.Fatalf("accepted a scenario with %d devices", sc.DeviceCount())
		}
		if _, err := New(sc, Options{Seed: 1}); err != nil {
			t.Fatalf("New on a valid scenario: %v", err)
		}
	})
}
