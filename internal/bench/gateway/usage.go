package main

import (
	"runtime/metrics"
	"time"
)

// usage is what a process has used: CPU time, read and write system
// calls, context switches of all its threads, voluntary (a thread
// blocked: each is a later wake-up) and not (zero where the platform does
// not say), and GC cycles (a role's are counted, and every process's
// printed, only with the bench's -gc).
type usage struct {
	cpu           time.Duration
	reads, writes int64
	switches      int64
	gcs           int64
}

func (u usage) add(v usage) usage {
	return usage{cpu: u.cpu + v.cpu, reads: u.reads + v.reads, writes: u.writes + v.writes, switches: u.switches + v.switches, gcs: u.gcs + v.gcs}
}

func (u usage) sub(v usage) usage {
	return usage{cpu: u.cpu - v.cpu, reads: u.reads - v.reads, writes: u.writes - v.writes, switches: u.switches - v.switches, gcs: u.gcs - v.gcs}
}

// ownGCs returns the GC cycles this process has completed.
func ownGCs() int64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}
