//go:build !linux

package main

import "time"

// cpuTime is not measured here; the bench prints no CPU figures.
func cpuTime(pid int) (time.Duration, bool) { return 0, false }
