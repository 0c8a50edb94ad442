package workspace

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzSplitPath: whatever a request sends as a path, an accepted one is
// clean, relative, beneath the root and free of reserved names.
func FuzzSplitPath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "a/../b", "/etc", "a//b", ".iop", "A/.IoP/x", "a/", ".", "..", "a\x00b", "a/./b", ".iop-tmp-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		parts, err := splitPath("fuzz", p)
		if err != nil {
			if CodeOf(err) != CodeInvalidPath && CodeOf(err) != CodeReserved {
				t.Fatalf("%q: untyped %v", p, err)
			}
			return
		}
		if p == "." {
			return
		}
		if filepath.Clean(p) != p || filepath.IsAbs(p) || strings.HasPrefix(p, "../") || p == ".." || len(parts) == 0 {
			t.Fatalf("accepted %q", p)
		}
		for _, c := range parts {
			if c == "" || c == "." || c == ".." || reservedName(c) || strings.ContainsRune(c, 0) {
				t.Fatalf("accepted %q with component %q", p, c)
			}
		}
	})
}

// FuzzExpand: whatever arguments a request sends for a command template,
// the argv keeps its fixed parts, and a placeholder value is one whole
// argument that never starts with "-", never holds NUL and, for a path,
// stays beneath the root.
func FuzzExpand(f *testing.F) {
	t := &Template{ID: "t", Argv: []string{"/usr/bin/tool", "--fixed", "{file}", "{n}", "{w}"},
		Args: map[string]ArgKind{"file": ArgPath, "n": ArgInt, "w": ArgWord}}
	f.Add("src/main.go", "10", "build")
	f.Add("-rf", "1", "x")
	f.Add("../../etc/passwd", "-1", "a b")
	f.Add(".iop/job/x", "99999999999999999999", "--help")
	f.Add("a", "1", "..")
	f.Add("a", "1", ".")
	f.Fuzz(func(tt *testing.T, file, n, w string) {
		argv, err := expand(t, map[string]string{"file": file, "n": n, "w": w})
		if err != nil {
			if CodeOf(err) != CodeBadArgument {
				tt.Fatalf("untyped %v", err)
			}
			return
		}
		if len(argv) != 5 || argv[0] != "/usr/bin/tool" || argv[1] != "--fixed" {
			tt.Fatalf("fixed parts changed: %q", argv)
		}
		for _, a := range argv[2:] {
			if a == "" || a[0] == '-' || strings.ContainsRune(a, 0) {
				tt.Fatalf("unsafe argument %q", a)
			}
		}
		if argv[4] == "." || argv[4] == ".." {
			tt.Fatalf("a word that names a directory: %q", argv[4])
		}
		if _, err := splitPath("fuzz", argv[2]); err != nil || strings.HasPrefix(argv[2], "/") {
			tt.Fatalf("a path argument outside the rules: %q", argv[2])
		}
	})
}
