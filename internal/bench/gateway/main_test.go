package main

import (
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
