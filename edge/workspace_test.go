//go:build linux

package edge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/wire/iopv1"
	"github.com/iop-dev/iop/workspace"
)

func wsLimits() workspace.Limits {
	return workspace.Limits{ReadBytes: 1 << 20, ListEntries: 100, WriteBytes: 1 << 20, CommandTimeout: 30 * time.Second, OutputBytes: 1 << 16}
}

// wsRig is an Edge with workspace specs and Nodes with their own
// catalogs, all real, on loopback.
type wsRig struct {
	t        *testing.T
	srv      *edge.Server
	cfg      edge.Config // as loaded
	nodeAddr string
	roots    map[string]string // node id -> its workspace root
}

func newWSRig(t *testing.T) *wsRig {
	t.Helper()
	full := workspace.Authority{Ops: []workspace.Op{workspace.OpRead, workspace.OpList, workspace.OpWrite, workspace.OpDelete, workspace.OpCommand},
		Commands: []string{"echo", "sleep"}, Limits: wsLimits()}
	cfg := edge.Config{Epoch: 1,
		Nodes: []nodes.Record{{ID: "n1", TokenHash: nodes.HashToken(nodeToken)}, {ID: "n2", TokenHash: nodes.HashToken(nodeToken)}},
		Workspaces: []edge.WorkspaceSpec{
			{Ref: "repo", NodeID: "n1", Authority: full},
			{Ref: "not-in-catalog", NodeID: "n1", Authority: full},
			{Ref: "on-n2", NodeID: "n2", Authority: full},
		},
	}
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	var wg sync.WaitGroup
	wg.Go(func() { srv.ServeNodes(ln) })
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return &wsRig{t: t, srv: srv, cfg: cfg, nodeAddr: ln.Addr().String(), roots: map[string]string{}}
}

// runNode starts a Node whose catalog has "repo" and "on-n2" (so a
// misrouted admission would find them) under one root.
func (r *wsRig) runNode(id string) (*node.Runtime, func()) {
	r.t.Helper()
	root := r.roots[id]
	if root == "" {
		root = filepath.Join(r.t.TempDir(), "root")
		os.Mkdir(root, 0o755)
		r.roots[id] = root
	}
	entry := func(ref string) workspace.Entry {
		return workspace.Entry{Ref: ref, Root: root, Platform: "linux",
			Ops:    []workspace.Op{workspace.OpRead, workspace.OpList, workspace.OpWrite, workspace.OpDelete, workspace.OpCommand},
			Limits: wsLimits(),
			Commands: []workspace.Template{
				{ID: "echo", Argv: []string{"/bin/echo", "{word}"}, Args: map[string]workspace.ArgKind{"word": workspace.ArgWord}},
				{ID: "sleep", Argv: []string{"/bin/sleep", "{n}"}, Args: map[string]workspace.ArgKind{"n": workspace.ArgInt}},
			}}
	}
	cat, err := workspace.NewCatalog([]workspace.Entry{entry("repo"), entry("on-n2")})
	if err != nil {
		r.t.Fatal(err)
	}
	rt, err := node.New(node.Config{EdgeAddr: r.nodeAddr, NodeID: id, Token: nodeToken, Workspaces: cat,
		Backoff: node.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rt.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	r.t.Cleanup(stop)
	waitUntil(r.t, id+" ready", func() bool { return rt.Status().State == node.StateReady })
	return rt, stop
}

func authority(ops ...workspace.Op) workspace.Authority {
	a := workspace.Authority{Ops: ops, Limits: wsLimits()}
	if contains(opsStrings(ops), "command") {
		a.Commands = []string{"echo", "sleep"}
	}
	return a
}

func opsStrings(ops []workspace.Op) []string {
	var out []string
	for _, o := range ops {
		out = append(out, string(o))
	}
	return out
}

func allWS() workspace.Authority {
	return authority(workspace.OpRead, workspace.OpList, workspace.OpWrite, workspace.OpDelete, workspace.OpCommand)
}

func wsCode(err error) iopv1.WorkspaceErrorCode {
	var we *edge.WorkspaceError
	if errors.As(err, &we) {
		return we.Code
	}
	return -1
}

// TestWorkspaceOverTheWire: every operation from the Edge through a real
// Node session to real files.
func TestWorkspaceOverTheWire(t *testing.T) {
	r := newWSRig(t)
	r.runNode("n1")
	ctx := context.Background()
	w, err := r.srv.OpenWorkspace(ctx, "repo", "req-1", "work", allWS())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, "t1", "notes/a.txt", []byte("alpha"), true); wsCode(err) != iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_NOT_FOUND {
		t.Fatalf("write into a missing directory: %v", err)
	}
	if err := w.Write(ctx, "t1", "a.txt", []byte("alpha"), true); err != nil {
		t.Fatal(err)
	}
	if b, _, err := w.Read(ctx, "t2", "a.txt"); err != nil || string(b) != "alpha" {
		t.Fatalf("read %q %v", b, err)
	}
	if ents, _, err := w.List(ctx, "t3", "."); err != nil || len(ents) != 1 || ents[0].Name != "a.txt" {
		t.Fatalf("list %+v %v (the namespace must not show)", ents, err)
	}
	res, err := w.Command(ctx, "t4", "echo", map[string]string{"word": "hello"})
	if err != nil || res.ExitCode != 0 || string(res.Output) != "hello\n" {
		t.Fatalf("command %+v %v", res, err)
	}
	if _, err := w.Command(ctx, "t5", "echo", map[string]string{"word": "-e"}); wsCode(err) != iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_BAD_ARGUMENT {
		t.Fatalf("an option as an argument: %v", err)
	}
	if _, _, err := w.Read(ctx, "t6", "../../etc/passwd"); wsCode(err) != iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_INVALID_PATH {
		t.Fatalf("traversal: %v", err)
	}
	if err := w.WriteArtifact(ctx, workspace.ArtifactPlan, []byte("# plan")); err != nil {
		t.Fatal(err)
	}
	if b, err := w.ReadArtifact(ctx, workspace.ArtifactPlan); err != nil || string(b) != "# plan" {
		t.Fatalf("artifact %q %v", b, err)
	}
	if err := w.Delete(ctx, "t7", "a.txt"); err != nil {
		t.Fatal(err)
	}
	rep, err := w.Cleanup(ctx)
	if err != nil || len(rep.Removed) != 2 || len(rep.Left) != 0 {
		t.Fatalf("cleanup %+v %v", rep, err)
	}
	if _, _, err := w.Read(ctx, "t8", "a.txt"); wsCode(err) != iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_NO_SESSION {
		t.Fatalf("after cleanup: %v", err)
	}
	// A narrower grant is enforced on the Node.
	ro, err := r.srv.OpenWorkspace(ctx, "repo", "req-2", "review", authority(workspace.OpRead))
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Write(ctx, "t9", "b.txt", []byte("x"), false); wsCode(err) != iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_DENIED {
		t.Fatalf("write under a read-only grant: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.roots["n1"], "b.txt")); err == nil {
		t.Fatal("the denied write happened")
	}
	ro.Cleanup(ctx)
}

// TestWorkspaceAdmission: only the configured ref, on its own Node's
// ready connection that accepted it, within its grant; everything else
// fails closed with nothing opened anywhere.
func TestWorkspaceAdmission(t *testing.T) {
	r := newWSRig(t)
	ctx := context.Background()
	if _, err := r.srv.OpenWorkspace(ctx, "repo", "req-1", "work", allWS()); !errors.Is(err, edge.ErrWorkspaceUnavailable) {
		t.Fatalf("node not connected: %v", err)
	}
	r.runNode("n1")
	for name, c := range map[string]struct {
		ref  string
		a    workspace.Authority
		want error
	}{
		"unknown ref":                 {"nope", allWS(), edge.ErrUnknownWorkspace},
		"malformed ref":               {"../repo", allWS(), edge.ErrUnknownWorkspace},
		"refused by the node catalog": {"not-in-catalog", allWS(), edge.ErrWorkspaceUnavailable},
		// n1's catalog has "on-n2", but the Edge resolves it only to n2,
		// which is offline: no fallback to n1.
		"foreign (other node offline)": {"on-n2", allWS(), edge.ErrWorkspaceUnavailable},
		"beyond the grant": {"repo", workspace.Authority{Ops: []workspace.Op{workspace.OpRead},
			Limits: workspace.Limits{ReadBytes: 2 << 20, ListEntries: 1, WriteBytes: 1, CommandTimeout: time.Second, OutputBytes: 1}}, edge.ErrWorkspaceDenied},
		"an unknown command": {"repo", workspace.Authority{Ops: []workspace.Op{workspace.OpCommand}, Commands: []string{"rm"}, Limits: wsLimits()}, edge.ErrWorkspaceDenied},
		"no operations":      {"repo", workspace.Authority{Limits: wsLimits()}, edge.ErrWorkspaceDenied},
	} {
		if _, err := r.srv.OpenWorkspace(ctx, c.ref, "req-x", "work", c.a); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(r.roots["n1"], ".iop", "job", "req-x")); err == nil {
		t.Fatal("a refused admission opened a namespace")
	}
}

// TestWorkspaceGrantReloaded: an open right after a reload that widens
// the grant waits for the Node to apply it, and opens (the Node would
// refuse it under the old grant); one right after a narrowing is refused
// by the Edge's own check of the new grant (the Node would accept it
// under the old).
func TestWorkspaceGrantReloaded(t *testing.T) {
	r := newWSRig(t)
	r.runNode("n1")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	reload := func(a workspace.Authority) {
		t.Helper()
		cfg := r.cfg
		cfg.Workspaces = slices.Clone(cfg.Workspaces)
		cfg.Workspaces[0].Authority = a // "repo"
		if err := r.srv.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		id := fmt.Sprintf("req-%d", i)
		reload(authority(workspace.OpRead))
		if _, err := r.srv.OpenWorkspace(ctx, "repo", id, "work", allWS()); !errors.Is(err, edge.ErrWorkspaceDenied) {
			t.Fatalf("round %d, beyond the narrowed grant: %v", i, err)
		}
		reload(allWS())
		w, err := r.srv.OpenWorkspace(ctx, "repo", id, "work", allWS())
		if err != nil {
			t.Fatalf("round %d, within the widened grant: %v", i, err)
		}
		if _, err := w.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWorkspaceFencedToGeneration: a workspace is frozen to the
// connection it was opened on; after a reconnect its calls fail (no
// reselection), and the Node cleaned the session up with the old
// connection.
func TestWorkspaceFencedToGeneration(t *testing.T) {
	r := newWSRig(t)
	_, stop := r.runNode("n1")
	ctx := context.Background()
	w, err := r.srv.OpenWorkspace(ctx, "repo", "req-1", "work", allWS())
	if err != nil {
		t.Fatal(err)
	}
	w.WriteArtifact(ctx, workspace.ArtifactPlan, []byte("plan"))
	ns := filepath.Join(r.roots["n1"], ".iop", "job", "req-1")
	if _, err := os.Stat(ns); err != nil {
		t.Fatal(err)
	}
	stop()
	waitUntil(t, "the namespace cleaned up with the connection", func() bool { _, err := os.Stat(ns); return err != nil })
	r.runNode("n1")
	if _, _, err := w.Read(ctx, "t1", "x"); !errors.Is(err, edge.ErrWorkspaceUnavailable) || !strings.Contains(err.Error(), "generation") {
		t.Fatalf("a call on the old generation: %v", err)
	}
}

// TestWorkspaceCommandCancel: cancelling the caller's context stops the
// command on the Node (its process is gone) and the call returns at once.
func TestWorkspaceCommandCancel(t *testing.T) {
	r := newWSRig(t)
	r.runNode("n1")
	w, err := r.srv.OpenWorkspace(context.Background(), "repo", "req-1", "work", allWS())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := w.Command(ctx, "t1", "sleep", map[string]string{"n": "6789"})
		errc <- err
	}()
	waitUntil(t, "the command running", func() bool { return sleeping("6789") })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled command: %v", err)
	}
	waitUntil(t, "the command's process gone", func() bool { return !sleeping("6789") })
	if _, err := w.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// sleeping reports whether a "sleep <arg>" process is alive.
func sleeping(arg string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Equal(b, []byte("/bin/sleep\x00"+arg+"\x00")) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if f := strings.Fields(string(st)); len(f) > 2 && f[2] != "Z" {
			return true
		}
	}
	return false
}
