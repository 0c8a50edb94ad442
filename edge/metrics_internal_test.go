package edge

import (
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestChildrenMakesEachOnce: concurrent first uses of a key make its
// child once, and every caller gets that one. The first make waits until
// every caller has started and has had time to find the key missing and
// queue for the lock, so a get that did not look again under the lock
// would make the child again.
func TestChildrenMakesEachOnce(t *testing.T) {
	const callers = 16
	var started sync.WaitGroup
	started.Add(callers)
	var made atomic.Int64
	c := children[routeSeries, *int]{newChild: func(routeSeries) *int {
		if made.Add(1) == 1 {
			started.Wait()
			time.Sleep(20 * time.Millisecond)
		}
		return new(int)
	}}
	keys := []routeSeries{{"a", apiChat}, {"a", apiMessages}, {"b", apiChat}}
	got := make([][]*int, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			started.Done()
			for i, k := range keys {
				v := c.get(k)
				mu.Lock()
				got[i] = append(got[i], v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := made.Load(); n != int64(len(keys)) {
		t.Fatalf("made %d children for %d keys", n, len(keys))
	}
	for i, vs := range got {
		for _, v := range vs {
			if v != vs[0] {
				t.Fatalf("key %v: callers got different children", keys[i])
			}
		}
	}
}

// TestMetricsDocumented: every series the Edge can export is listed in
// the package doc's Metrics section, and the section names none that
// does not exist, so the reference cannot drift from the code.
func TestMetricsDocumented(t *testing.T) {
	m := newMetrics(&Server{}, nil)
	descs := make(chan *prometheus.Desc, 64)
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.ttft, m.queueWait, m.tokens, m.tunnelBytes, m.leasesIssued, &stateCollector{}} {
		c.Describe(descs)
	}
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	exported := map[string]bool{}
	for d := range descs {
		match := fqName.FindStringSubmatch(d.String())
		if match == nil {
			t.Fatalf("no name in %s", d)
		}
		exported[match[1]] = true
	}

	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "// # Metrics\n")
	if !ok {
		t.Fatal("doc.go has no Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n//\n// The Edge is the source of truth")
	documented := map[string]bool{}
	for _, name := range regexp.MustCompile(`iop_edge_[a-z_]+`).FindAllString(section, -1) {
		documented[name] = true
	}
	for name := range exported {
		if !documented[name] {
			t.Errorf("%s is exported but not in the package doc's Metrics section", name)
		}
	}
	for name := range documented {
		if !exported[name] {
			t.Errorf("the package doc lists %s, which the Edge does not export", name)
		}
	}
	if len(exported) < 20 {
		t.Errorf("only %d series described: %v", len(exported), exported)
	}
}
