//go:build linux

package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

// TestStatusPageInBrowser loads the status page in a real headless
// Chromium, signed in by a #token= link, and watches the page's title (which
// summarizes every Node row) follow a Node online, with the warning that its
// client certificate ends in two days, and then offline through the live
// event stream. Without Chromium the test is skipped, unless
// IOP_REQUIRE_BROWSER=1 (as .ci/run sets) makes that a failure.
func TestStatusPageInBrowser(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		if os.Getenv("IOP_REQUIRE_BROWSER") == "1" {
			t.Fatal("IOP_REQUIRE_BROWSER=1 and no chromium on PATH")
		}
		t.Skip("no chromium on PATH (set IOP_REQUIRE_BROWSER=1 to fail instead)")
	}
	h := startHub(t, "", nil)
	// Over mutual TLS, with the Node's certificate two days from its end;
	// its upstream refuses every call as rate limited for a minute.
	limited := func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Status: http.StatusTooManyRequests, RetryAfter: "60"}
	}
	e1 := startEdge(t, "e1", h.addr, limited, withNodeCertificate(48*time.Hour))
	e1.startNode()
	waitFor(t, "n-e1 online at the hub", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return n.Connected })

	b := startBrowser(t, bin, h.url+"/#token="+url.QueryEscape(operatorToken))
	// The page warns of the certificate's end (the title carries it too).
	waitTitle(t, b, "n-e1 online in the page, its certificate expiring", "e1/n-e1:online (certificate expiring)")
	if title := b.title(); strings.Contains(title, operatorToken) {
		t.Fatalf("the token shows in the title: %q", title)
	}
	// The token was taken out of the address bar.
	if u := b.url(); strings.Contains(u, "token") {
		t.Fatalf("the sign-in token stayed in the address bar: %q", u)
	}
	// The model cools after its 429: the operator's API says until when,
	// and the page names it.
	before := time.Now()
	if code := chat(t, e1.url); code != http.StatusTooManyRequests {
		t.Fatalf("a chat to the rate-limited upstream: %d", code)
	}
	a := do(t, http.DefaultClient, h.url, apiCall{method: "GET", path: "/api/edges/e1?refresh=1", header: bearer(operatorToken)})
	var view struct{ Nodes []controlplane.NodeView }
	if err := json.Unmarshal([]byte(a.body), &view); err != nil || len(view.Nodes) != 1 || len(view.Nodes[0].Providers) != 1 {
		t.Fatalf("the Edge's view: %d %v\n%s", a.status, err, a.body)
	}
	if until, ok := view.Nodes[0].Providers[0].CoolingModels["up-model"]; !ok || until.Before(before.Add(59*time.Second)) || until.After(time.Now().Add(61*time.Second)) {
		t.Fatalf("p-e1's up-model cooling until %v, want a minute from now\n%s", until, a.body)
	}
	waitTitle(t, b, "p-e1's up-model cooling in the page", "e1/n-e1:online (certificate expiring) (cooling p-e1/up-model)")
	e1.stopNodeRuntime()
	waitTitle(t, b, "n-e1 offline in the page", "e1/n-e1:offline")
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

type browser struct {
	t     *testing.T
	debug string // http://127.0.0.1:port
}

func startBrowser(t *testing.T, bin, pageURL string) *browser {
	t.Helper()
	// Chromium comes up in well under a second here, but on a loaded CI
	// machine (go test ./... runs packages side by side) one start has
	// hung before writing its DevTools port. A start that does not come
	// up is killed and tried once more; the test is about the page, not
	// about Chromium's start.
	var why string
	for range 2 {
		if b, err := launchBrowser(t, bin, pageURL); err == nil {
			return b
		} else {
			why = err.Error()
		}
	}
	t.Fatalf("chromium did not come up twice: %s", why)
	return nil
}

// launchBrowser starts Chromium on pageURL and waits for its DevTools
// port. A start that fails is stopped and reported with the end of
// Chromium's output.
func launchBrowser(t *testing.T, bin, pageURL string) (*browser, error) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--user-data-dir="+dir, pageURL)
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Chromium starts helper processes; they share its process group and
	// are killed with it, so none outlives the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cancel()
		<-exited
		// The group's other members die with the signal; wait until none
		// is left before the profile directory is removed.
		for range 100 {
			if syscall.Kill(-cmd.Process.Pid, 0) != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "DevToolsActivePort")); err == nil {
			if port, _, _ := strings.Cut(string(b), "\n"); port != "" {
				t.Cleanup(stop)
				return &browser{t: t, debug: "http://127.0.0.1:" + port}, nil
			}
		}
		select {
		case err := <-exited:
			exited <- err // for stop
			stop()
			return nil, fmt.Errorf("chromium exited (%v) before its DevTools port: %s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("no DevTools port after 30s: %s", out.String())
		}
	}
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if over := len(w.b) - 4<<10; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(string(w.b))
}

// page returns the first page target's title and URL.
func (b *browser) page() (title, u string) {
	resp, err := http.Get(b.debug + "/json/list")
	if err != nil {
		return "", ""
	}
	defer resp.Body.Close()
	var targets []struct {
		Type  string `json:"type"`
		Title string `json:"title"`
		URL   string `json:"url"`
	}
	json.NewDecoder(resp.Body).Decode(&targets)
	for _, tg := range targets {
		if tg.Type == "page" {
			return tg.Title, tg.URL
		}
	}
	return "", ""
}

func (b *browser) title() string { t, _ := b.page(); return t }
func (b *browser) url() string   { _, u := b.page(); return u }

func waitTitle(t *testing.T, b *browser, what, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		title := b.title()
		if strings.Contains(title, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: title %q", what, title)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
