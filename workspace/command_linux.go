package workspace

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// command builds the child: on Linux its working directory is the
// already-opened root through /proc/self/fd while the parent holds dir,
// so a root renamed or swapped meanwhile is not followed; it dies with the
// Node (Pdeathsig).
func (r *root) command(ctx context.Context, argv []string, dir int) (*exec.Cmd, func()) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = fmt.Sprintf("/proc/self/fd/%d", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, func() {}
}

// sealDescriptors marks every descriptor above 2 close-on-exec, so one the
// Node inherited without it (from a shell or a service manager) never
// reaches a command. Go opens its own descriptors close-on-exec already.
func sealDescriptors() {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}
