//go:build linux

package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("IOP_WS_HELPER"); mode != "" && len(os.Args) > 1 && os.Args[len(os.Args)-1] != "" {
		helper(os.Args[len(os.Args)-1])
		return
	}
	goleak.VerifyTestMain(m)
}

// helper is the command the templates run: the test binary itself, in a
// mode named by its last argument. It ends with syscall.Exit, which skips
// the exit hooks: a test binary built with -cover would otherwise print a
// coverage warning into the output the tests compare.
func helper(mode string) {
	switch mode {
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
	case "pwd":
		wd, _ := os.Getwd()
		fmt.Println(wd)
		st, _ := os.Stat(".")
		fmt.Println(st.Sys().(*syscall.Stat_t).Ino)
	case "fds":
		ents, _ := os.ReadDir("/proc/self/fd")
		var fds []int
		for _, e := range ents {
			n, _ := strconv.Atoi(e.Name())
			if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && t == "/proc/"+strconv.Itoa(os.Getpid())+"/fd" {
				continue // the descriptor reading this directory
			}
			fds = append(fds, n)
		}
		fmt.Println(fds)
	case "stdin":
		n, _ := os.Stdin.Read(make([]byte, 10))
		fmt.Println("stdin", n)
	case "flood":
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range 16 {
			os.Stdout.Write(chunk)
			os.Stderr.Write(chunk)
		}
	case "grandchild":
		// A grandchild in the same process group that outlives this one.
		p, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
		if err != nil {
			fmt.Println("start:", err)
			syscall.Exit(3)
		}
		fmt.Println("grandchild", p.Pid)
		os.Stdout.Sync()
		time.Sleep(time.Minute)
	case "exit3":
		syscall.Exit(3)
	}
	syscall.Exit(0)
}

const secret = "outside secret: must never be read or changed"

// ws is a workspace root and, beside it, an outside directory whose
// content must never change or be read.
type ws struct {
	t       *testing.T
	root    string
	outside string
	cat     *Catalog
	s       *Session
	before  string // outside's fingerprint
}

func allAuthority() Authority {
	return Authority{Ops: allOps, Commands: []string{"helper", "lsfd"}, Limits: testLimits()}
}

func testLimits() Limits {
	return Limits{ReadBytes: 1 << 20, ListEntries: 1000, WriteBytes: 1 << 20, CommandTimeout: 10 * time.Second, OutputBytes: 64 << 10}
}

func newWS(t *testing.T, mutate func(*Entry)) *ws {
	t.Helper()
	base := t.TempDir()
	w := &ws{t: t, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{w.root, w.outside, filepath.Join(w.root, "dir")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(w.outside, "secret"), []byte(secret), 0o644)
	os.WriteFile(filepath.Join(w.root, "hello.txt"), []byte("hello"), 0o644)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Ref: "repo", Root: w.root, Platform: "linux", Ops: allOps, Limits: testLimits(),
		Env: []string{"IOP_WS_HELPER", "SAFE_VAR"},
		Commands: []Template{
			{ID: "helper", Argv: []string{exe, "-test.run=^$", "{mode}"}, Args: map[string]ArgKind{"mode": ArgWord}},
			{ID: "lsfd", Argv: []string{"/bin/ls", "-l", "/proc/self/fd"}},
		}}
	if mutate != nil {
		mutate(&e)
	}
	t.Setenv("IOP_WS_HELPER", "1")
	w.cat, err = NewCatalog([]Entry{e})
	if err != nil {
		t.Fatal(err)
	}
	w.s, err = w.cat.Open("repo", allAuthority(), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.s.Cleanup() })
	w.before = w.fingerprint()
	return w
}

// fingerprint hashes every name and content under outside.
func (w *ws) fingerprint() string {
	h := sha256.New()
	filepath.WalkDir(w.outside, func(p string, d fs.DirEntry, err error) error {
		fmt.Fprintln(h, p, err)
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}

// untouched checks nothing outside changed.
func (w *ws) untouched() {
	w.t.Helper()
	if w.fingerprint() != w.before {
		w.t.Fatal("something outside the root changed")
	}
}

func (w *ws) path(rel string) string { return filepath.Join(w.root, rel) }

func expectCode(t *testing.T, what string, err error, want Code) {
	t.Helper()
	if got := CodeOf(err); got != want {
		t.Fatalf("%s: code %q (%v), want %q", what, got, err, want)
	}
}

func noSecret(t *testing.T, what string, b []byte) {
	t.Helper()
	if bytes.Contains(b, []byte("outside secret")) {
		t.Fatalf("%s: read the outside file", what)
	}
}

func TestFileOperations(t *testing.T) {
	w := newWS(t, nil)
	b, cut, err := w.s.Read("hello.txt")
	if err != nil || string(b) != "hello" || cut {
		t.Fatalf("read: %q %v %v", b, cut, err)
	}
	if err := w.s.Write("dir/new.txt", []byte("one"), true); err != nil {
		t.Fatal(err)
	}
	expectCode(t, "create-only onto an existing file", w.s.Write("dir/new.txt", []byte("two"), true), CodeExists)
	if err := w.s.Write("dir/new.txt", []byte("two"), false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(w.path("dir/new.txt")); string(b) != "two" {
		t.Fatalf("after replace: %q", b)
	}
	expectCode(t, "write above the limit", w.s.Write("big", make([]byte, 2<<20), false), CodeTooLarge)
	os.WriteFile(w.path("large"), make([]byte, 3<<20), 0o644)
	b, cut, err = w.s.Read("large")
	if err != nil || !cut || len(b) != 1<<20 {
		t.Fatalf("bounded read: %d %v %v", len(b), cut, err)
	}
	ents, cut, err := w.s.List(".")
	if err != nil || cut {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name+":"+e.Type)
	}
	if strings.Join(names, ",") != "dir:dir,hello.txt:file,large:file" {
		t.Fatalf("list: %v (the namespace must not show)", names)
	}
	expectCode(t, "delete a non-empty directory", w.s.Delete("dir"), CodeNotEmpty)
	if err := w.s.Delete("dir/new.txt"); err != nil {
		t.Fatal(err)
	}
	if err := w.s.Delete("dir"); err != nil {
		t.Fatal(err)
	}
	expectCode(t, "delete a missing file", w.s.Delete("dir"), CodeNotFound)
	// No temporary file is left behind.
	ents2, _ := os.ReadDir(w.root)
	for _, e := range ents2 {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
}

func TestListTruncation(t *testing.T) {
	w := newWS(t, nil)
	for i := range 30 {
		os.WriteFile(w.path(fmt.Sprintf("dir/f%02d", 29-i)), nil, 0o644)
	}
	os.Mkdir(w.path("dir/.IOP"), 0o700)
	s, err := w.cat.Open("repo", Authority{Ops: []Op{OpList}, Limits: Limits{ReadBytes: 1, ListEntries: 10, WriteBytes: 1, CommandTimeout: time.Second, OutputBytes: 1}}, "req-2")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cleanup()
	ents, cut, err := s.List("dir")
	if err != nil || !cut || len(ents) != 10 || ents[0].Name != "f00" || ents[9].Name != "f09" {
		t.Fatalf("truncated list: %v %v %v", ents, cut, err)
	}
	_, _, err = s.Read("hello.txt")
	expectCode(t, "an operation not granted", err, CodeDenied)
}

// TestListNamesNotUTF8: a file whose name is not UTF-8 (Latin-1 here,
// which Linux allows) is left out of a listing, as no path can name it;
// the rest is listed.
func TestListNamesNotUTF8(t *testing.T) {
	w := newWS(t, nil)
	if err := os.WriteFile(w.path("dir/caf\xe9"), nil, 0o644); err != nil {
		t.Skipf("this file system refuses the name: %v", err)
	}
	os.WriteFile(w.path("dir/ok"), nil, 0o644)
	ents, _, err := w.s.List("dir")
	if err != nil || len(ents) != 1 || ents[0].Name != "ok" {
		t.Fatalf("list: %v %v", ents, err)
	}
	_, _, err = w.s.Read("dir/caf\xe9")
	expectCode(t, "a path that is not UTF-8", err, CodeInvalidPath)
}

func TestPathText(t *testing.T) {
	w := newWS(t, nil)
	for _, p := range []string{"", "/etc/passwd", "../outside/secret", "dir/../../outside/secret", "a//b", "a/./b", ".", "dir/", "a\x00b", strings.Repeat("a/", 40) + "a", strings.Repeat("x", 2000), "\xff"} {
		_, _, err := w.s.Read(p)
		if c := CodeOf(err); c != CodeInvalidPath && !(p == "." && c == CodeNotRegular) {
			t.Errorf("%q: %v", p, err)
		}
	}
	w.untouched()
}

// The attack suite: each case asserts a typed error and no effect outside
// the root. It runs with openat2 and again with the component walk forced.
func TestAttacks(t *testing.T) {
	for _, walk := range []bool{false, true} {
		t.Run(map[bool]string{false: "openat2", true: "walk"}[walk], func(t *testing.T) {
			forceWalk.Store(walk)
			defer forceWalk.Store(false)
			attacks(t)
		})
	}
}

func attacks(t *testing.T) {
	run := func(name string, f func(t *testing.T, w *ws)) {
		t.Run(name, func(t *testing.T) {
			w := newWS(t, nil)
			f(t, w)
			w.untouched()
		})
	}
	run("symlink leaf, absolute target", func(t *testing.T, w *ws) {
		os.Symlink(filepath.Join(w.outside, "secret"), w.path("abs"))
		b, _, err := w.s.Read("abs")
		noSecret(t, "read", b)
		expectCode(t, "read", err, CodeLink)
	})
	run("symlink leaf, relative target", func(t *testing.T, w *ws) {
		os.Symlink("../outside/secret", w.path("rel"))
		b, _, err := w.s.Read("rel")
		noSecret(t, "read", b)
		expectCode(t, "read", err, CodeLink)
	})
	run("symlink leaf inside the root", func(t *testing.T, w *ws) {
		os.Symlink("hello.txt", w.path("inner"))
		_, _, err := w.s.Read("inner")
		expectCode(t, "read", err, CodeLink)
	})
	run("symlink as an intermediate component", func(t *testing.T, w *ws) {
		os.Symlink(w.outside, w.path("d"))
		b, _, err := w.s.Read("d/secret")
		noSecret(t, "read", b)
		expectCode(t, "read", err, CodeLink)
		expectCode(t, "write", w.s.Write("d/planted", []byte("x"), false), CodeLink)
		_, _, err = w.s.List("d")
		expectCode(t, "list", err, CodeLink)
	})
	run("symlink with a trailing slash", func(t *testing.T, w *ws) {
		os.Symlink(w.outside, w.path("d"))
		_, _, err := w.s.List("d/")
		expectCode(t, "list", err, CodeInvalidPath)
	})
	run("create through a dangling symlink", func(t *testing.T, w *ws) {
		os.Symlink(filepath.Join(w.outside, "created"), w.path("dang"))
		expectCode(t, "create-only", w.s.Write("dang", []byte("x"), true), CodeLink)
		expectCode(t, "write", w.s.Write("dang", []byte("x"), false), CodeLink)
	})
	run("write onto a symlink", func(t *testing.T, w *ws) {
		os.Symlink(filepath.Join(w.outside, "secret"), w.path("onto"))
		expectCode(t, "write", w.s.Write("onto", []byte("overwritten"), false), CodeLink)
		expectCode(t, "delete", w.s.Delete("onto"), CodeLink)
	})
	run("hard link to an outside file", func(t *testing.T, w *ws) {
		if err := os.Link(filepath.Join(w.outside, "secret"), w.path("hl")); err != nil {
			t.Skip(err)
		}
		b, _, err := w.s.Read("hl")
		noSecret(t, "read", b)
		expectCode(t, "read", err, CodeHardLinked)
		expectCode(t, "write", w.s.Write("hl", []byte("x"), false), CodeHardLinked)
		expectCode(t, "delete", w.s.Delete("hl"), CodeHardLinked)
	})
	run("FIFO does not hang", func(t *testing.T, w *ws) {
		unix.Mkfifo(w.path("fifo"), 0o644)
		_, _, err := w.s.Read("fifo")
		expectCode(t, "read", err, CodeNotRegular)
		expectCode(t, "write", w.s.Write("fifo", []byte("x"), false), CodeNotRegular)
	})
	run("socket", func(t *testing.T, w *ws) {
		ln, err := net.Listen("unix", w.path("sock"))
		if err != nil {
			t.Skip(err)
		}
		defer ln.Close()
		_, _, err = w.s.Read("sock")
		expectCode(t, "read", err, CodeNotRegular)
	})
	run("device node", func(t *testing.T, w *ws) {
		if err := unix.Mknod(w.path("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Skipf("mknod: %v", err)
		}
		_, _, err := w.s.Read("null")
		expectCode(t, "read", err, CodeNotRegular)
		expectCode(t, "delete", w.s.Delete("null"), CodeNotRegular)
	})
	run("a directory opened as a file", func(t *testing.T, w *ws) {
		_, _, err := w.s.Read("dir")
		expectCode(t, "read", err, CodeNotRegular)
		expectCode(t, "write", w.s.Write("dir", []byte("x"), false), CodeNotRegular)
		_, _, err = w.s.List("hello.txt")
		expectCode(t, "list a file", err, CodeNotRegular)
	})
	run("bind mount inside the root", func(t *testing.T, w *ws) {
		os.Mkdir(w.path("mnt"), 0o755)
		if err := unix.Mount(w.outside, w.path("mnt"), "", unix.MS_BIND, ""); err != nil {
			t.Skipf("bind mount needs privileges here: %v", err)
		}
		defer unix.Unmount(w.path("mnt"), unix.MNT_DETACH)
		b, _, err := w.s.Read("mnt/secret")
		noSecret(t, "read", b)
		expectCode(t, "read", err, CodeCrossesMount)
		_, _, err = w.s.List("mnt")
		expectCode(t, "list", err, CodeCrossesMount)
		expectCode(t, "write", w.s.Write("mnt/planted", []byte("x"), false), CodeCrossesMount)
	})
	run("a directory swapped with a symlink while reads run", func(t *testing.T, w *ws) {
		os.Mkdir(w.path("a"), 0o755)
		os.WriteFile(w.path("a/file"), []byte("inside"), 0o644)
		os.Symlink(w.outside, w.path("evil"))
		os.WriteFile(filepath.Join(w.outside, "file"), []byte(secret), 0o644)
		w.before = w.fingerprint()
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for !stop.Load() {
				os.Rename(w.path("a"), w.path("a.real"))
				os.Rename(w.path("evil"), w.path("a"))
				os.Rename(w.path("a"), w.path("evil"))
				os.Rename(w.path("a.real"), w.path("a"))
			}
		})
		reads := 0
		for range 2000 {
			b, _, err := w.s.Read("a/file")
			noSecret(t, "racing read", b)
			if err == nil {
				reads++
			} else if c := CodeOf(err); c != CodeLink && c != CodeNotFound && c != CodeNotRegular {
				t.Errorf("racing read: %v", err)
			}
		}
		stop.Store(true)
		wg.Wait()
		t.Logf("%d of 2000 racing reads saw the inside file; none saw the outside one", reads)
	})
	run(".iop in every spelling", func(t *testing.T, w *ws) {
		for _, p := range []string{".iop", ".IOP/job", ".Iop", "dir/.iOp", ".iop-tmp-123", "dir/.IOP-TMP-x"} {
			_, _, err := w.s.Read(p)
			expectCode(t, p, err, CodeReserved)
			expectCode(t, p, w.s.Write(p, []byte("x"), false), CodeReserved)
			expectCode(t, p, w.s.Delete(p), CodeReserved)
		}
		ents, _, _ := w.s.List(".")
		for _, e := range ents {
			if strings.EqualFold(e.Name, ".iop") {
				t.Fatal("list shows .iop")
			}
		}
	})
	run(".iop through a symlink", func(t *testing.T, w *ws) {
		w.s.WriteArtifact(ArtifactPlan, []byte("the plan"))
		os.Symlink(".iop", w.path("alias"))
		b, _, err := w.s.Read("alias/job/req-1/plan.md")
		if bytes.Contains(b, []byte("the plan")) {
			t.Fatal("read the namespace through a link")
		}
		expectCode(t, "read", err, CodeLink)
	})
	run("the root renamed after open", func(t *testing.T, w *ws) {
		os.Rename(w.root, w.root+".moved")
		defer os.Rename(w.root+".moved", w.root)
		_, _, err := w.s.Read("hello.txt")
		expectCode(t, "read", err, CodeRootChanged)
		expectCode(t, "write", w.s.Write("x", []byte("x"), false), CodeRootChanged)
	})
	run("the root replaced by a link after open", func(t *testing.T, w *ws) {
		os.Rename(w.root, w.root+".moved")
		defer func() { os.Remove(w.root); os.Rename(w.root+".moved", w.root) }()
		os.Symlink(w.outside, w.root)
		b, _, err := w.s.Read("secret")
		noSecret(t, "read", b)
		expectCode(t, "read", err, CodeRootChanged)
		expectCode(t, "write", w.s.Write("planted", []byte("x"), false), CodeRootChanged)
		if _, err := w.cat.Open("repo", allAuthority(), "req-9"); CodeOf(err) != CodeRootChanged {
			t.Fatalf("open on a replaced root: %v", err)
		}
	})
	run("cleanup after an inventoried file was swapped", func(t *testing.T, w *ws) {
		if err := w.s.WriteArtifact(ArtifactPlan, []byte("plan")); err != nil {
			t.Fatal(err)
		}
		ns := w.path(".iop/job/req-1")
		os.WriteFile(filepath.Join(ns, "other"), []byte("swapped in"), 0o600)
		os.Rename(filepath.Join(ns, "other"), filepath.Join(ns, "plan.md"))
		_, err := w.s.ReadArtifact(ArtifactPlan)
		expectCode(t, "read the swapped artifact", err, CodeRootChanged)
		rep, err := w.s.Cleanup()
		if err != nil || !slices.Contains(rep.Left, ".iop/job/req-1/plan.md") || !slices.Contains(rep.Left, ".iop/job/req-1") {
			t.Fatalf("cleanup %+v %v", rep, err)
		}
		if b, _ := os.ReadFile(filepath.Join(ns, "plan.md")); string(b) != "swapped in" {
			t.Fatal("cleanup removed a file it did not create")
		}
	})
	run("cleanup with a planted file and user results", func(t *testing.T, w *ws) {
		w.s.WriteArtifact(ArtifactReview, []byte("review"))
		w.s.Write("result.txt", []byte("user result"), false)
		ns := w.path(".iop/job/req-1")
		os.WriteFile(filepath.Join(ns, "planted"), []byte("x"), 0o600)
		rep, _ := w.s.Cleanup()
		if !slices.Contains(rep.Removed, ".iop/job/req-1/review.md") || !slices.Contains(rep.Left, ".iop/job/req-1/planted") {
			t.Fatalf("cleanup %+v", rep)
		}
		if _, err := os.Stat(filepath.Join(ns, "planted")); err != nil {
			t.Fatal("the planted file was removed")
		}
		if b, _ := os.ReadFile(w.path("result.txt")); string(b) != "user result" {
			t.Fatal("cleanup touched a user result")
		}
	})
	run("environment: LD_PRELOAD, GIT_* and *_TOKEN are not passed", func(t *testing.T, w *ws) {
		t.Setenv("LD_PRELOAD", "/tmp/evil.so")
		t.Setenv("GIT_DIR", "/tmp/evil")
		t.Setenv("GITHUB_TOKEN", "ghp_secret")
		t.Setenv("SAFE_VAR", "fine")
		res, err := w.s.Run(context.Background(), "helper", map[string]string{"mode": "env"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		out := string(res.Output)
		for _, bad := range []string{"LD_PRELOAD", "GIT_DIR", "GITHUB_TOKEN", "ghp_secret"} {
			if strings.Contains(out, bad) {
				t.Fatalf("%s reached the command:\n%s", bad, out)
			}
		}
		for _, want := range []string{"SAFE_VAR=fine", "PATH=" + fixedPath, "HOME=", "TMPDIR="} {
			if !strings.Contains(out, want) {
				t.Fatalf("%s missing:\n%s", want, out)
			}
		}
	})
	run("a grandchild still running after a timeout", func(t *testing.T, w *ws) {
		s, err := w.cat.Open("repo", Authority{Ops: []Op{OpCommand}, Commands: []string{"helper"},
			Limits: Limits{ReadBytes: 1, ListEntries: 1, WriteBytes: 1, CommandTimeout: 500 * time.Millisecond, OutputBytes: 4096}}, "req-gc")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Cleanup()
		res, err := s.Run(context.Background(), "helper", map[string]string{"mode": "grandchild"})
		if err != nil || !res.TimedOut {
			t.Fatalf("%+v %v", res, err)
		}
		var pid int
		fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(string(res.Output)), "grandchild "), "%d", &pid)
		if pid == 0 {
			t.Fatalf("no grandchild pid: %q", res.Output)
		}
		waitDead(t, pid)
	})
	run("output flooding both streams", func(t *testing.T, w *ws) {
		res, err := w.s.Run(context.Background(), "helper", map[string]string{"mode": "flood"})
		if err != nil || res.ExitCode != 0 || !res.Truncated || len(res.Output) != 64<<10 {
			t.Fatalf("exit %d truncated %v len %d err %v", res.ExitCode, res.Truncated, len(res.Output), err)
		}
	})
	run("only descriptors 0-2 open in the child, stdin is /dev/null", func(t *testing.T, w *ws) {
		// The harness itself hands this process descriptors without
		// close-on-exec (a shell's 10, a pipe): they must not reach the
		// command. ls -l shows the child's table; its own descriptor for
		// /proc/self/fd is the only one beyond 0-2.
		res, err := w.s.Run(context.Background(), "lsfd", nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		for _, ln := range strings.Split(strings.TrimSpace(string(res.Output)), "\n")[1:] {
			f := strings.Fields(ln)
			if len(f) < 11 {
				continue
			}
			fd, target := f[8], f[10]
			if fd != "0" && fd != "1" && fd != "2" && !strings.HasPrefix(target, "/proc/") {
				t.Fatalf("descriptor %s -> %s reached the command:\n%s", fd, target, res.Output)
			}
		}
		res, _ = w.s.Run(context.Background(), "helper", map[string]string{"mode": "stdin"})
		if strings.TrimSpace(string(res.Output)) != "stdin 0" {
			t.Fatalf("stdin %q", res.Output)
		}
	})
	run("the command runs in the opened root", func(t *testing.T, w *ws) {
		res, err := w.s.Run(context.Background(), "helper", map[string]string{"mode": "pwd"})
		var st unix.Stat_t
		unix.Stat(w.root, &st)
		if err != nil || !strings.Contains(string(res.Output), strconv.FormatUint(st.Ino, 10)) {
			t.Fatalf("%q %v", res.Output, err)
		}
	})
	run("command arguments are typed", func(t *testing.T, w *ws) {
		for _, args := range []map[string]string{{"mode": "-rf"}, {"mode": "a b"}, {"mode": "../x"}, {}, {"mode": "env", "extra": "x"}} {
			_, err := w.s.Run(context.Background(), "helper", args)
			expectCode(t, fmt.Sprint(args), err, CodeBadArgument)
		}
		_, err := w.s.Run(context.Background(), "other", nil)
		expectCode(t, "an unknown command", err, CodeDenied)
	})
}

// waitDead waits for a process to be gone or a zombie.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(b)); len(f) > 2 && (f[2] == "Z" || f[2] == "X") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("grandchild %d still running after the command's timeout", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCatalogRules(t *testing.T) {
	dir := t.TempDir()
	exe, _ := os.Executable()
	good := Entry{Ref: "r", Root: dir, Platform: "linux", Ops: []Op{OpRead, OpCommand}, Limits: testLimits(),
		Commands: []Template{{ID: "t", Argv: []string{exe, "{x}"}, Args: map[string]ArgKind{"x": ArgWord}}}}
	if _, err := newCatalog([]Entry{good}, "linux"); err != nil {
		t.Fatal(err)
	}
	if c, err := newCatalog(nil, "windows"); err != nil || len(c.Refs()) != 0 {
		t.Fatal("an empty catalog must be fine anywhere")
	}
	if _, err := newCatalog([]Entry{good}, "windows"); CodeOf(err) != CodeUnsupportedHost {
		t.Fatalf("unsupported host: %v", err)
	}
	// A platform mismatch fails before any root is opened: the root below
	// does not exist, and the error is about the platform.
	darwin := good
	darwin.Platform, darwin.Root = "darwin", "/nonexistent/root"
	if _, err := newCatalog([]Entry{darwin}, "linux"); err == nil || !strings.Contains(err.Error(), "platform") {
		t.Fatalf("platform mismatch: %v", err)
	}
	inside := filepath.Join(dir, "tool")
	os.WriteFile(inside, []byte("#!/bin/sh\n"), 0o755)
	for name, edit := range map[string]func(*Entry){
		"relative root":            func(e *Entry) { e.Root = "root" },
		"root is /":                func(e *Entry) { e.Root = "/" },
		"missing root":             func(e *Entry) { e.Root = filepath.Join(dir, "nope") },
		"unknown op":               func(e *Entry) { e.Ops = []Op{"exec"} },
		"zero limit":               func(e *Entry) { e.Limits.ReadBytes = 0 },
		"limit above the ceiling":  func(e *Entry) { e.Limits.CommandTimeout = 2 * time.Hour },
		"LD_PRELOAD allowed":       func(e *Entry) { e.Env = []string{"LD_PRELOAD"} },
		"a token allowed":          func(e *Entry) { e.Env = []string{"GITHUB_TOKEN"} },
		"GIT_ allowed":             func(e *Entry) { e.Env = []string{"GIT_SSH_COMMAND"} },
		"PATH allowed":             func(e *Entry) { e.Env = []string{"PATH"} },
		"relative argv0":           func(e *Entry) { e.Commands[0].Argv = []string{"sh", "{x}"} },
		"argv0 inside the root":    func(e *Entry) { e.Commands[0].Argv = []string{inside, "{x}"} },
		"untyped placeholder":      func(e *Entry) { e.Commands[0].Args = nil },
		"partial placeholder":      func(e *Entry) { e.Commands[0].Argv = []string{exe, "--file={x}"} },
		"commands without command": func(e *Entry) { e.Ops = []Op{OpRead} },
		"bad ref":                  func(e *Entry) { e.Ref = "a/b" },
	} {
		e := good
		e.Commands = []Template{{ID: "t", Argv: slices.Clone(good.Commands[0].Argv), Args: map[string]ArgKind{"x": ArgWord}}}
		edit(&e)
		if _, err := newCatalog([]Entry{e}, "linux"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c, _ := newCatalog([]Entry{good}, "linux")
	for name, a := range map[string]Authority{
		"an op beyond":     {Ops: []Op{OpWrite}, Limits: testLimits()},
		"a command beyond": {Ops: []Op{OpCommand}, Commands: []string{"rm"}, Limits: testLimits()},
		"a limit above":    {Ops: []Op{OpRead}, Limits: Limits{ReadBytes: 2 << 20, ListEntries: 1, WriteBytes: 1, CommandTimeout: time.Second, OutputBytes: 1}},
		"an unknown ref":   {Ops: []Op{OpRead}, Limits: testLimits()},
		"a command, no op": {Ops: []Op{OpRead}, Commands: []string{"t"}, Limits: testLimits()},
		"missing limits":   {Ops: []Op{OpRead}},
	} {
		ref := "r"
		if name == "an unknown ref" {
			ref = "other"
		}
		if err := c.Check(ref, a); CodeOf(err) != CodeDenied {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestConcurrentCleanupSharesOneResult(t *testing.T) {
	w := newWS(t, nil)
	w.s.WriteArtifact(ArtifactPlan, []byte("p"))
	var wg sync.WaitGroup
	reports := make([]CleanupReport, 8)
	for i := range reports {
		wg.Go(func() { reports[i], _ = w.s.Cleanup() })
	}
	wg.Wait()
	for _, r := range reports {
		if fmt.Sprint(r) != fmt.Sprint(reports[0]) || len(r.Removed) != 2 {
			t.Fatalf("reports differ or wrong: %+v", reports)
		}
	}
	if _, err := os.Stat(w.path(".iop/job/req-1")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the namespace is still there")
	}
	_, _, err := w.s.Read("hello.txt")
	expectCode(t, "after cleanup", err, CodeClosed)
}

// TestCleanupStopsCommands: cleanup cancels a running command and waits
// for its whole process group.
func TestCleanupStopsCommands(t *testing.T) {
	w := newWS(t, nil)
	done := make(chan *Result, 1)
	go func() {
		res, _ := w.s.Run(context.Background(), "helper", map[string]string{"mode": "grandchild"})
		done <- res
	}()
	time.Sleep(200 * time.Millisecond)
	w.s.Cleanup()
	res := <-done
	if res == nil || !res.Canceled {
		t.Fatalf("the command was not cancelled: %+v", res)
	}
	var pid int
	fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(string(res.Output)), "grandchild "), "%d", &pid)
	if pid != 0 {
		waitDead(t, pid)
	}
}

// TestCleanupWaitsForOperations: operations racing with Cleanup either
// finish on the open root or are refused as closed; none runs on a
// descriptor Cleanup already closed.
func TestCleanupWaitsForOperations(t *testing.T) {
	for range 20 {
		w := newWS(t, nil)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					_, _, err := w.s.Read("hello.txt")
					if c := CodeOf(err); err != nil && c != CodeClosed {
						t.Errorf("racing read: %v", err)
						return
					}
					if err := w.s.Write("dir/x", []byte("x"), false); err != nil && CodeOf(err) != CodeClosed {
						t.Errorf("racing write: %v", err)
						return
					}
				}
			})
		}
		w.s.Cleanup()
		wg.Wait()
		w.untouched()
	}
}
