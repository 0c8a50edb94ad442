package workspace

import (
	"errors"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// openat2Missing is set once openat2 answered ENOSYS or EPERM (an old
// kernel or a seccomp profile); forceWalk makes tests take the walk.
var (
	openat2Missing atomic.Bool
	forceWalk      atomic.Bool
)

// resolve opens parts beneath the root with flags. On Linux it is one
// openat2 call that refuses every symlink, every escape, every mount
// crossing and magic links; without openat2 it is the component walk.
func (r *root) resolve(op string, parts []string, flags int, mode uint32) (int, error) {
	if !forceWalk.Load() && !openat2Missing.Load() {
		how := &unix.OpenHow{
			Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
			Mode:    uint64(mode),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS,
		}
		fd, err := unix.Openat2(r.fd, strings.Join(parts, "/"), how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
			openat2Missing.Store(true)
		case errors.Is(err, unix.ENOTDIR):
			// A link or a file where a directory was expected: the walk
			// (just as safe) tells which.
			return r.walk(op, parts, flags, mode)
		default:
			return -1, classify(op, strings.Join(parts, "/"), err, -1, "")
		}
	}
	return r.walk(op, parts, flags, mode)
}

// mountID returns the mount id of an open file (statx STATX_MNT_ID), so a
// bind mount of the root's own file system is still seen as a crossing.
func mountID(fd int) (uint64, error) {
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &sx); err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
			return 0, nil // no statx: st_dev checks remain
		}
		return 0, err
	}
	if sx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, nil
	}
	return sx.Mnt_id, nil
}

func renameNoReplace(dir int, from, to string) error {
	return unix.Renameat2(dir, from, dir, to, unix.RENAME_NOREPLACE)
}
