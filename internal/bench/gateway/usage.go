package main

import "time"

// usage is what a process has used: CPU time, read and write system
// calls, and context switches of all its threads, voluntary (a thread
// blocked: each is a later wake-up) and not (zero where the platform does
// not say).
type usage struct {
	cpu           time.Duration
	reads, writes int64
	switches      int64
}

func (u usage) add(v usage) usage {
	return usage{cpu: u.cpu + v.cpu, reads: u.reads + v.reads, writes: u.writes + v.writes, switches: u.switches + v.switches}
}

func (u usage) sub(v usage) usage {
	return usage{cpu: u.cpu - v.cpu, reads: u.reads - v.reads, writes: u.writes - v.writes, switches: u.switches - v.switches}
}
