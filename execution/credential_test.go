package execution

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFileCredential(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	os.WriteFile(good, []byte("  sk-file-0123456789  \n"), 0o600)
	if s, err := FileCredential(good).Secret(context.Background()); err != nil || s != "sk-file-0123456789" {
		t.Fatalf("%q %v", s, err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 128<<10), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	for _, p := range []string{"/dev/zero", dir, big, empty, filepath.Join(dir, "missing")} {
		s, err := FileCredential(p).Secret(context.Background())
		if !errors.Is(err, ErrNoCredential) || s != "" {
			t.Errorf("%s: %q %v", p, s, err)
		}
	}
	if strings.Contains(FileCredential(good).String(), "sk-") {
		t.Fatal("String shows the secret")
	}
}
