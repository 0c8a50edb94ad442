//go:build !linux

package main

// procUsage is not measured here; the bench prints no CPU or system call
// figures.
func procUsage(pid int) (usage, bool) { return usage{}, false }
