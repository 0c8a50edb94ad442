package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// cpuTime returns the CPU time (user + system, every thread) that process
// pid has used so far, at the kernel's clock-tick resolution.
func cpuTime(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces; fields after it start
	// past the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, false
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on every Linux ABI Go supports
	return time.Duration(ut+st) * tick, true
}
