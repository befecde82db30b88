package gpuprobe

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Open loads the CUDA driver library (libPath; "" means DefaultLibCUDA,
// found the way dlopen finds it) and binds the entry points the probe uses.
// It calls nothing in the library: Init is the first CUDA call. A missing
// library or symbol is an error, never a panic; the error names what is
// missing.
func Open(libPath string) (*CUDA, error) {
	if libPath == "" {
		libPath = DefaultLibCUDA
	}
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return nil, fmt.Errorf("gpuprobe: the CUDA driver binding needs a 64-bit platform")
	}
	lib, err := purego.Dlopen(libPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("gpuprobe: loading the CUDA driver library (libcuda) %s: %w", libPath, err)
	}
	c := &CUDA{path: libPath, lib: lib, dlclose: purego.Dlclose}
	lookup := func(name string) (uintptr, error) { return purego.Dlsym(lib, name) }
	register := func(fn any, addr uintptr) { purego.RegisterFunc(fn, addr) }
	if err := c.bind(lookup, register); err != nil {
		_ = purego.Dlclose(lib)
		return nil, err
	}
	return c, nil
}
