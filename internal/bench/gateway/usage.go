package main

import "time"

// usage is what a process has used: CPU time and read and write system
// calls (zero where the platform does not say).
type usage struct {
	cpu           time.Duration
	reads, writes int64
}

func (u usage) add(v usage) usage {
	return usage{cpu: u.cpu + v.cpu, reads: u.reads + v.reads, writes: u.writes + v.writes}
}

func (u usage) sub(v usage) usage {
	return usage{cpu: u.cpu - v.cpu, reads: u.reads - v.reads, writes: u.writes - v.writes}
}
