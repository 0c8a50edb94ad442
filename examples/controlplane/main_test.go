package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
)

// TestHubDaemonAndClient runs the Hub from a hub.yaml, links a real Edge
// to it, and drives the operator client against it.
func TestHubDaemonAndClient(t *testing.T) {
	const opToken = "op-token-0123456789abcdef0123456789"
	const edgeToken = "edge-token-0123456789abcdef0123"
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "edge.token"), []byte(edgeToken+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "hub.yaml"), []byte(`
edges_listen: 127.0.0.1:0
http: {listen: 127.0.0.1:0}
edges:
  - {id: e1, token: {file: edge.token}}
operators:
  - {name: ops, token: {env: TEST_OPERATOR_TOKEN}}
`), 0o600)
	t.Setenv("TEST_OPERATOR_TOKEN", opToken)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan [2]string, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	serveErr := make(chan error, 1)
	wg.Go(func() {
		serveErr <- serve(ctx, filepath.Join(dir, "hub.yaml"), hclog.NewNullLogger(), func(e, h string) { addrs <- [2]string{e, h} })
	})
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-serveErr:
		t.Fatal(err)
	}

	srv, err := edge.New(edge.Config{Epoch: 1,
		Nodes: []nodes.Record{{ID: "n1", TokenHash: nodes.HashToken("node-token-0123456789abcdef"), Providers: []nodes.ProviderSpec{
			{ID: "p1", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m"}, Capacity: 2}}}},
		Routes:    []edge.Route{{Model: "m", Targets: []edge.Target{{ProviderID: "p1", Model: "m"}}}},
		MaxQueued: 64, MaxQueuedBytes: 64 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	nodeLn, _ := net.Listen("tcp", "127.0.0.1:0")
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	wg.Go(func() {
		srv.ConnectControlPlane(ctx, controlplane.ConnectorConfig{HubAddr: a[0], EdgeID: "e1", Token: edgeToken})
	})

	env := map[string]string{"IOP_HUB_URL": a[1], "IOP_OPERATOR_TOKEN": opToken}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, func(k string) string { return env[k] }, &out)
		return out.String(), err
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		out, err := cli("edges")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "e1    true") && strings.Contains(out, "0/64") {
			break // connected, and its status (with its queue's bound) has come
		}
		if time.Now().After(deadline) {
			t.Fatalf("edge never connected:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, err := cli("edge", "e1", "-refresh")
	if err != nil || !strings.Contains(out, "n1") || !strings.Contains(out, "p1") || !strings.Contains(out, "offline") ||
		!strings.Contains(out, "queued 0/64 (0 B of 64 MiB), 0 turned away by a full queue") {
		t.Fatalf("edge e1: %v\n%s", err, out)
	}
	out, err = cli("command", "e1", "provider.disable", "-provider", "p1")
	if err != nil || !strings.Contains(out, "accepted cmd_") || !strings.Contains(out, "succeeded") {
		t.Fatalf("provider.disable: %v\n%s", err, out)
	}
	out, err = cli("command", "e1", "provider.enable", "-provider", "p1")
	if err != nil || !strings.Contains(out, "succeeded") {
		t.Fatalf("provider.enable: %v\n%s", err, out)
	}
	// Rejected and failed commands exit non-zero with the Edge's reason.
	_, err = cli("command", "e1", "node.drain", "-node", "ghost")
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != 404 || !strings.Contains(ae.Code, "not_found") {
		t.Fatalf("drain of an unknown node: %v", err)
	}
	if _, err := cli("command", "e1", "config.refresh"); err == nil {
		t.Fatal("config.refresh without a configuration source succeeded")
	}
	var ue usageError
	for _, args := range [][]string{{}, {"bogus"}, {"command", "e1"}, {"edge"}, {"command", "e1", "node.drain", "-arg", "novalue"},
		// A stray word is refused, never run with a default in its place.
		{"serve", "hub.yaml"}, {"edges", "e1"}, {"events", "e1"}, {"edge", "e1", "extra"}} {
		if _, err := cli(args...); !errors.As(err, &ue) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	env["IOP_OPERATOR_TOKEN"] = "wrong-token-0123456789abcdef"
	if _, err := cli("edges"); !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("a wrong token: %v", err)
	}
	cancel()
	if err := <-serveErr; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// TestCheck: `controlplane check` accepts a valid hub.yaml and prints
// what it configures, needs no Hub running or operator token, and refuses
// an invalid file with the reason.
func TestCheck(t *testing.T) {
	t.Setenv("TEST_OPERATOR_TOKEN", "op-token-0123456789abcdef0123456789")
	dir := t.TempDir()
	path := filepath.Join(dir, "hub.yaml")
	valid := `
edges_listen: 127.0.0.1:9450
http: {listen: 127.0.0.1:9451}
edges:
  - {id: e1, token: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}}
operators:
  - {name: ops, token: {env: TEST_OPERATOR_TOKEN}}
`
	os.WriteFile(path, []byte(valid), 0o600)
	getenv := func(string) string { return "" }
	var out bytes.Buffer
	if err := run(context.Background(), []string{"check", "-config", path}, getenv, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{path + " is valid.", "edges_listen 127.0.0.1:9450 (plaintext)", "http         http://127.0.0.1:9451", "edges        1 enrolled", "operators    1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check printed:\n%s\nwant it to include %q", out.String(), want)
		}
	}
	for _, tc := range []struct{ old, new, want string }{
		{"127.0.0.1:9450", "9450", `edges_listen "9450" is not a host:port`},
		{"{env: TEST_OPERATOR_TOKEN}", "{env: TEST_UNSET}", "unset"},
		{"http: {listen: 127.0.0.1:9451}", "http: {listen: 127.0.0.1:9451, tls: {cert_file: hub.crt, key_file: hub.key}}", "hub.crt"},
	} {
		os.WriteFile(path, []byte(strings.Replace(valid, tc.old, tc.new, 1)), 0o600)
		if err := run(context.Background(), []string{"check", "-config", path}, getenv, &out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check with %q: %v, want it to mention %q", tc.new, err, tc.want)
		}
	}
	var ue usageError
	if err := run(context.Background(), []string{"check", path}, getenv, &out); !errors.As(err, &ue) {
		t.Errorf("check with the path but no -config: %v, want a usage error", err)
	}
}

// TestCooling: the edge view's status column names what of a provider
// cools (the whole provider, models by name, in order) and until when;
// an ended cooldown is not shown.
func TestCooling(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.Local)
	soon, past := now.Add(90*time.Second), now.Add(-time.Second)
	for _, c := range []struct {
		p    controlplane.ProviderView
		want string
	}{
		{controlplane.ProviderView{}, ""},
		{controlplane.ProviderView{CoolingUntil: &past, CoolingModels: map[string]time.Time{"m": past}}, ""},
		{controlplane.ProviderView{CoolingUntil: &soon}, " (cooling until 12:01:30)"},
		{controlplane.ProviderView{CoolingModels: map[string]time.Time{"b": soon, "a": soon, "old": past}}, " (a cooling until 12:01:30; b cooling until 12:01:30)"},
	} {
		if got := cooling(c.p, now); got != c.want {
			t.Errorf("cooling(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

// TestCoolingText: the events command says what a provider_cooling event
// found cooling (the provider, then its models by name) or that it ended.
func TestCoolingText(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.ParseInLocation(time.TimeOnly, s, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	whole := at("10:00:05")
	for _, tt := range []struct {
		p    controlplane.ProviderView
		want string
	}{
		{controlplane.ProviderView{}, "cooling ended"},
		{controlplane.ProviderView{CoolingUntil: &whole}, "cooling until 10:00:05"},
		{controlplane.ProviderView{CoolingModels: map[string]time.Time{"b": at("10:00:07"), "a": at("10:00:06")}}, "cooling a until 10:00:06, b until 10:00:07"},
		{controlplane.ProviderView{CoolingUntil: &whole, CoolingModels: map[string]time.Time{"a": at("10:00:06")}}, "cooling until 10:00:05, a until 10:00:06"},
	} {
		if got := coolingText(tt.p); got != tt.want {
			t.Errorf("coolingText(%+v) = %q, want %q", tt.p, got, tt.want)
		}
	}
}

// TestQueuedText: the edges and edge commands show the queue against
// each bound the Edge reports, the bytes in binary units.
func TestQueuedText(t *testing.T) {
	for _, c := range []struct {
		e    edgeJSON
		want string
	}{
		{edgeJSON{Queued: 3}, "3"},
		{edgeJSON{Queued: 3, MaxQueued: 1024}, "3/1024"},
		{edgeJSON{Queued: 3, MaxQueued: 1024, QueuedBytes: 1536 << 10, MaxQueuedBytes: 256 << 20}, "3/1024 (1.5 MiB of 256 MiB)"},
		{edgeJSON{MaxQueued: 8, MaxQueuedBytes: 1 << 40}, "0/8 (0 B of 1 TiB)"},
		{edgeJSON{Queued: 1, MaxQueued: 8, QueuedBytes: 1000, MaxQueuedBytes: 4096}, "1/8 (1000 B of 4 KiB)"},
	} {
		if got := c.e.queued(); got != c.want {
			t.Errorf("queued(%+v) = %q, want %q", c.e, got, c.want)
		}
	}
}
