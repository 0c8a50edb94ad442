//go:build linux || darwin

package workspace_test

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/iop-dev/iop/workspace"
)

// A Node's catalog with one workspace, and one request using it: files
// beneath the root only, never through a link, and nothing left behind
// in the request namespace after Cleanup.
func ExampleCatalog() {
	root, _ := os.MkdirTemp("", "workspace-example-")
	defer os.RemoveAll(root)
	limits := workspace.Limits{ReadBytes: 1 << 20, ListEntries: 100, WriteBytes: 1 << 20, CommandTimeout: time.Minute, OutputBytes: 1 << 16}
	cat, err := workspace.NewCatalog([]workspace.Entry{{
		Ref: "repo", Root: root, Platform: runtime.GOOS,
		Ops: []workspace.Op{workspace.OpRead, workspace.OpList, workspace.OpWrite}, Limits: limits,
	}})
	if err != nil {
		panic(err)
	}
	// The Edge grants a request read and write only.
	s, err := cat.Open("repo", workspace.Authority{Ops: []workspace.Op{workspace.OpRead, workspace.OpWrite}, Limits: limits}, "req-1")
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Write("notes.txt", []byte("hello"), true))
	b, _, _ := s.Read("notes.txt")
	fmt.Println(string(b))
	_, _, err = s.Read("../etc/passwd")
	fmt.Println(workspace.CodeOf(err))
	_, _, err = s.List(".")
	fmt.Println(workspace.CodeOf(err)) // list was not granted
	rep, _ := s.Cleanup()
	fmt.Println(rep.Removed)
	// Output:
	// <nil>
	// hello
	// invalid_path
	// denied
	// [.iop/job/req-1]
}
