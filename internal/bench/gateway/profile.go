package main

import (
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile of this process to path ("" for none)
// until the returned stop is called.
func startProfile(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	pprof.StartCPUProfile(f)
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if m, err := os.Create(path + ".alloc"); err == nil {
			pprof.Lookup("allocs").WriteTo(m, 0)
			m.Close()
		}
	}
}
