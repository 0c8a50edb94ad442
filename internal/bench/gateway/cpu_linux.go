package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// procUsage returns what process pid has used so far: CPU time (user +
// system, every thread, at the kernel's clock-tick resolution) and the
// read and write system calls it made (read, readv, write, writev and
// their kin, counted whether or not they moved bytes: an EAGAIN read
// counts too).
func procUsage(pid int) (usage, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, false
	}
	// The command name (field 2) may hold spaces; fields after it start
	// past the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return usage{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return usage{}, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return usage{}, false
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on every Linux ABI Go supports
	u := usage{cpu: time.Duration(ut+st) * tick}
	// /proc/PID/io may be unreadable (a hardened kernel); the CPU time
	// stands alone then.
	if io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for line := range bytes.Lines(io) {
			k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(": "))
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				continue
			}
			switch string(k) {
			case "syscr":
				u.reads = n
			case "syscw":
				u.writes = n
			}
		}
	}
	u.switches = switches(pid)
	return u, true
}

// switches sums the context switches, voluntary and not, of every thread
// of process pid (a thread that has exited no longer counts, which the Go
// runtime's threads rarely do).
func switches(pid int) int64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for line := range bytes.Lines(b) {
			k, v, ok := bytes.Cut(line, []byte(":"))
			if !ok || !bytes.HasSuffix(k, []byte("ctxt_switches")) {
				continue
			}
			if c, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
				n += c
			}
		}
	}
	return n
}
