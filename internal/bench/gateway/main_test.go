package main

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGOGC(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		bad  bool
	}{
		{in: "", want: map[string]string{}},
		{in: "edge=800,node=800", want: map[string]string{"edge": "800", "node": "800"}},
		{in: " proxy=off , edge=0 ,", want: map[string]string{"proxy": "off", "edge": "0"}},
		{in: "edge", bad: true},
		{in: "edge=", bad: true},
		{in: "edge=-1", bad: true},
		{in: "edge=8OO", bad: true},
		{in: "edge=+800", bad: true},
		{in: "client=800", bad: true},
		{in: "edge=800,edge=400", bad: true},
	} {
		got, err := parseGOGC(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseGOGC(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseGOGC(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("parseGOGC(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestCountGCs(t *testing.T) {
	in := strings.Join([]string{
		"gc 1 @0.012s 2%: 0.018+0.41+0.005 ms clock, 0.036+0.10/0.30/0+0.010 ms cpu, 3->3->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		"2026-12-06T03:00:00.000Z [WARN]  edge: a role's log line",
		"gc 2 @0.030s 2%: 0.010+0.35+0.004 ms clock, 0.020+0.05/0.20/0+0.008 ms cpu, 3->3->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)",
		"gc x @0.1s",          // not a cycle number
		"gc 3 is not a trace", // no start time
		"gcfoo 4 @1s",
		"",
	}, "\n") + "\n"
	var out strings.Builder
	var n atomic.Int64
	countGCs(strings.NewReader(in), &out, &n)
	if n.Load() != 2 {
		t.Errorf("counted %d cycles, want 2", n.Load())
	}
	want := "2026-12-06T03:00:00.000Z [WARN]  edge: a role's log line\ngc x @0.1s\ngc 3 is not a trace\ngcfoo 4 @1s\n\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("lines passed on (-want +got):\n%s", diff)
	}
}

func TestWithGCTrace(t *testing.T) {
	for in, want := range map[string]string{"": "gctrace=1", "madvdontneed=1": "madvdontneed=1,gctrace=1", "gctrace=2": "gctrace=2,gctrace=1"} {
		if got := withGCTrace(in); got != want {
			t.Errorf("withGCTrace(%q) = %q, want %q", in, got, want)
		}
	}
}
