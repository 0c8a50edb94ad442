package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iop-dev/iop/internal/syncbuf"
)

// TestQuickstart runs the quickstart and the request it prints.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, options{addr: "127.0.0.1:0", statusAddr: "127.0.0.1:0"}, &out) }()
	var url, key string
	urlRe := regexp.MustCompile(`OpenAI-compatible API\s+(\S+)/v1`)
	keyRe := regexp.MustCompile(`API key\s+(sk-iop-\S+)`)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if m := urlRe.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			key = keyRe.FindStringSubmatch(out.String())[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"iop-echo","messages":[{"role":"user","content":"Hello, IOP!"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "echo: Hello, IOP!") {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}

	// The status page link signs in with the operator token; the same
	// token reads the Hub's view, where the Edge and its Node are online.
	m := regexp.MustCompile(`Status page\s+(http://\S+)/#token=(\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no status page link:\n%s", out.String())
	}
	hubURL, opToken := m[1], m[2]
	for deadline := time.Now().Add(20 * time.Second); ; {
		req, _ := http.NewRequest("GET", hubURL+"/api/edges?nodes=1", nil)
		req.Header.Set("Authorization", "Bearer "+opToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var view struct {
			Edges []struct {
				ID          string `json:"id"`
				Connected   bool   `json:"connected"`
				NodesOnline int    `json:"nodes_online"`
			} `json:"edges"`
		}
		json.NewDecoder(resp.Body).Decode(&view)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("operator API: %d", resp.StatusCode)
		}
		if len(view.Edges) == 1 && view.Edges[0].ID == "quickstart-edge" && view.Edges[0].Connected && view.Edges[0].NodesOnline == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub never showed the edge and its node online: %+v", view)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestParseArgs: the flags are read; a stray word (a configuration file
// the quickstart does not take) and an unknown flag are refused with the
// reason on stderr, so main exits 2 instead of running.
func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		want   options
		stderr string // "" means no error
	}{
		{nil, options{addr: "127.0.0.1:8080", statusAddr: "127.0.0.1:8081", ollamaURL: "http://127.0.0.1:11434"}, ""},
		{[]string{"-addr", "127.0.0.1:0", "-ollama="}, options{addr: "127.0.0.1:0", statusAddr: "127.0.0.1:8081"}, ""},
		{[]string{"edge.yaml"}, options{}, `quickstart: unexpected argument "edge.yaml"`},
		{[]string{"-addr", "127.0.0.1:0", "extra"}, options{}, `quickstart: unexpected argument "extra"`},
		{[]string{"-config", "edge.yaml"}, options{}, "flag provided but not defined: -config"},
	} {
		var stderr strings.Builder
		got, err := parseArgs(tc.args, &stderr)
		if (err != nil) != (tc.stderr != "") || got != tc.want || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("parseArgs(%q) = %+v, %v; stderr:\n%s", tc.args, got, err, stderr.String())
		}
	}
	var stderr strings.Builder
	if _, err := parseArgs([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-status-addr") {
		t.Errorf("-h: %v\n%s", err, stderr.String())
	}
}
