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
