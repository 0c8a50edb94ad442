package workspace

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// trampolineArg0 marks a re-exec of the Node's own binary that enters the
// already-opened root (descriptor 3) and then executes the template.
const trampolineArg0 = "iop-workspace-trampoline"

func init() {
	if len(os.Args) >= 4 && os.Args[0] == trampolineArg0 {
		trampoline(os.Args[1], os.Args[2], os.Args[3:])
	}
}

// trampoline runs in the child: fchdir to descriptor 3, check it is the
// root by device and inode, close it, exec argv. It never returns.
func trampoline(dev, ino string, argv []string) {
	var st unix.Stat_t
	ok := unix.Fchdir(3) == nil && unix.Fstat(3, &st) == nil &&
		strconv.FormatUint(uint64(st.Dev), 10) == dev && strconv.FormatUint(st.Ino, 10) == ino
	unix.Close(3)
	if ok {
		err := syscall.Exec(argv[0], argv, os.Environ())
		fmt.Fprintln(os.Stderr, "iop workspace: exec:", err)
	} else {
		fmt.Fprintln(os.Stderr, "iop workspace: the root changed before the command started")
	}
	os.Exit(127)
}

// command builds the child on macOS: the Node's own binary in trampoline
// mode with the root as descriptor 3 (the only extra descriptor; it is
// closed before the template runs).
func (r *root) command(ctx context.Context, argv []string, dir int) (*exec.Cmd, func()) {
	exe, err := os.Executable()
	if err != nil {
		exe = "/nonexistent"
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Args = append([]string{trampolineArg0, strconv.FormatUint(r.dev, 10), strconv.FormatUint(r.ino, 10)}, argv...)
	extra, err := unix.Dup(dir)
	if err != nil {
		return cmd, func() {} // Start fails without the descriptor: the trampoline refuses
	}
	f := os.NewFile(uintptr(extra), "workspace-root")
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, func() { f.Close() }
}

// sealDescriptors marks every descriptor above 2 close-on-exec, so one the
// Node inherited without it never reaches a command.
func sealDescriptors() {
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}
