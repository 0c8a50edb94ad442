package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

func read(t *testing.T, path string) (string, fs.FileMode) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), st.Mode().Perm()
}

// noTemporaries fails if a temporary file is left in dir.
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := Write(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, m := read(t, p); b != "one" || runtime.GOOS != "windows" && m != 0o644 {
		t.Fatalf("%q %v", b, m)
	}
	// A file replaced takes the new mode, not the old one's: a secret
	// written over a readable file is not left readable.
	if err := Write(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, m := read(t, p); b != "two" || runtime.GOOS != "windows" && m != 0o600 {
		t.Fatalf("%q %v", b, m)
	}
	noTemporaries(t, dir)
}

func TestCreate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := Create(p, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Create(p, []byte("second"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over a file: %v, want fs.ErrExist", err)
	}
	if b, _ := read(t, p); b != "first" {
		t.Fatalf("a refused Create changed the file: %q", b)
	}
	noTemporaries(t, dir)
}

// TestCreateRace: of many creators of one file, exactly one succeeds and
// the file holds its bytes whole.
func TestCreateRace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = Create(p, []byte{byte('a' + i)}, 0o600) })
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("creators %d and %d both succeeded", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, fs.ErrExist):
			t.Fatalf("creator %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no creator succeeded")
	}
	if b, _ := read(t, p); b != string(rune('a'+won)) {
		t.Fatalf("file holds %q, the winner wrote %q", b, string(rune('a'+won)))
	}
	noTemporaries(t, dir)
}

// TestFailureLeavesTheFile: a write that cannot be put in place (a
// directory stands at the path) fails, leaves what is there as it was and
// no temporary file.
func TestFailureLeavesTheFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(p, "kept")
	if err := os.WriteFile(inner, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o600); err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	if err := Create(p, []byte("new"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over a directory: %v, want fs.ErrExist", err)
	}
	if b, _ := read(t, inner); b != "old" {
		t.Fatalf("a failed write changed what was there: %q", b)
	}
	noTemporaries(t, dir)
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Write into a missing directory: %v", err)
	}
}
