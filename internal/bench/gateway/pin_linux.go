package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// startOn starts cmd with every thread of the new process on CPU cpu: the
// child inherits the mask of the thread that forks it, so its runtime
// sizes GOMAXPROCS to one CPU from the start.
func startOn(cmd *exec.Cmd, cpu int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	defer unix.SchedSetaffinity(0, &old)
	return cmd.Start()
}

// pinSelf keeps every thread of this process on CPU cpu (threads started
// later inherit the mask of the thread that starts them) and sets
// GOMAXPROCS to match.
func pinSelf(cpu int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	var set unix.CPUSet
	set.Set(cpu)
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pin thread %d to CPU %d: %w", tid, cpu, err)
		}
	}
	runtime.GOMAXPROCS(1)
	return nil
}
