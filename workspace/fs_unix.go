//go:build linux || darwin

package workspace

import (
	"errors"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// root is a workspace root opened for one session. Every operation starts
// from fd; the path is used only to notice that the root was renamed or
// replaced.
type root struct {
	fd       int
	path     string
	dev, ino uint64
	mnt      uint64 // Linux mount id (0 elsewhere)
}

func rootIdentity(path string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, 0, err
	}
	if uint32(st.Mode)&unix.S_IFMT != unix.S_IFDIR {
		return 0, 0, errors.New("not a directory (a symlink is not accepted)")
	}
	return uint64(st.Dev), uint64(st.Ino), nil
}

// openRoot opens e's root and checks it is still the directory the
// catalog validated.
func openRoot(e *entry) (*root, error) {
	fd, err := unix.Open(e.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fail(CodeRootChanged, "open", "", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || uint64(st.Dev) != e.dev || uint64(st.Ino) != e.ino {
		unix.Close(fd)
		return nil, fail(CodeRootChanged, "open", "", errors.New("the root is not the directory the catalog validated"))
	}
	r := &root{fd: fd, path: e.Root, dev: e.dev, ino: e.ino}
	r.mnt, err = mountID(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fail(CodeIO, "open", "", err)
	}
	return r, nil
}

func (r *root) close() { unix.Close(r.fd) }

// check refuses to go on when the root's path no longer names the opened
// directory (renamed away, or replaced by another directory or a link).
func (r *root) check(op string) error {
	var st unix.Stat_t
	if err := unix.Lstat(r.path, &st); err != nil || uint64(st.Dev) != r.dev || uint64(st.Ino) != r.ino || uint32(st.Mode)&unix.S_IFMT != unix.S_IFDIR {
		return fail(CodeRootChanged, op, "", nil)
	}
	return nil
}

// sameMount reports whether fd is on the root's mount.
func (r *root) sameMount(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if uint64(st.Dev) != r.dev {
		return errXDev
	}
	if m, err := mountID(fd); err != nil {
		return err
	} else if m != r.mnt {
		return errXDev
	}
	return nil
}

var errXDev = errors.New("crosses a mount")

// walk opens parts beneath the root one component at a time, never
// following a link (O_NOFOLLOW on every component, directories opened with
// O_DIRECTORY) and checking the mount at every step. It is the fallback
// where openat2 is unavailable, and the only resolver on macOS.
func (r *root) walk(op string, parts []string, flags int, mode uint32) (int, error) {
	dir, err := unix.Openat(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fail(CodeIO, op, "", err)
	}
	for i, c := range parts {
		last := i == len(parts)-1
		f := unix.O_RDONLY | unix.O_DIRECTORY
		m := uint32(0)
		if last {
			f, m = flags, mode
		}
		fd, err := unix.Openat(dir, c, f|unix.O_NOFOLLOW|unix.O_CLOEXEC, m)
		if err != nil {
			e := classify(op, strings.Join(parts[:i+1], "/"), err, dir, c)
			unix.Close(dir)
			return -1, e
		}
		unix.Close(dir)
		if err := r.sameMount(fd); err != nil {
			unix.Close(fd)
			return -1, fail(CodeCrossesMount, op, strings.Join(parts[:i+1], "/"), nil)
		}
		dir = fd
	}
	return dir, nil
}

// classify turns an open error into a typed failure; for ENOTDIR it looks
// at the component to tell a link from a file.
func classify(op, path string, err error, dir int, name string) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EMLINK):
		return fail(CodeLink, op, path, nil)
	case errors.Is(err, unix.EXDEV):
		return fail(CodeCrossesMount, op, path, nil)
	case errors.Is(err, unix.ENOENT):
		return fail(CodeNotFound, op, path, nil)
	case errors.Is(err, unix.EEXIST):
		return fail(CodeExists, op, path, nil)
	case errors.Is(err, unix.ENOTDIR):
		var st unix.Stat_t
		if dir >= 0 && unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK {
			return fail(CodeLink, op, path, nil)
		}
		return fail(CodeNotRegular, op, path, nil)
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENXIO), errors.Is(err, unix.EOPNOTSUPP):
		return fail(CodeNotRegular, op, path, nil)
	}
	return fail(CodeIO, op, path, err)
}

// openDir opens the directory parts names (the root for none).
func (r *root) openDir(op string, parts []string) (int, error) {
	if len(parts) == 0 {
		fd, err := unix.Openat(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fail(CodeIO, op, "", err)
		}
		return fd, nil
	}
	return r.resolve(op, parts, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// regularFile checks an open file: regular, one link.
func regularFile(op, path string, fd int) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fail(CodeIO, op, path, err)
	}
	if uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG {
		return nil, fail(CodeNotRegular, op, path, nil)
	}
	if st.Nlink != 1 {
		return nil, fail(CodeHardLinked, op, path, nil)
	}
	return &st, nil
}

// readFile reads at most limit bytes of a regular file beneath the root.
// It opens with O_NONBLOCK so a FIFO cannot block it (and is refused).
func (r *root) readFile(op, path string, parts []string, limit int64) ([]byte, bool, error) {
	fd, err := r.resolve(op, parts, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, false, err
	}
	f := os.NewFile(uintptr(fd), "workspace-file")
	defer f.Close()
	st, err := regularFile(op, path, fd)
	if err != nil {
		return nil, false, err
	}
	n := min(st.Size, limit)
	buf := make([]byte, n+1)
	got := 0
	for got < len(buf) {
		m, err := f.Read(buf[got:])
		got += m
		if err != nil || m == 0 {
			break
		}
	}
	if int64(got) > limit {
		return buf[:limit], true, nil
	}
	return buf[:got], false, nil
}

// maxScan bounds the names a list reads before sorting.
const maxScan = 1_000_000

func (r *root) list(op, path string, parts []string, limit int) ([]DirEntry, bool, error) {
	fd, err := r.openDir(op, parts)
	if err != nil {
		return nil, false, err
	}
	f := os.NewFile(uintptr(fd), "workspace-dir")
	defer f.Close()
	var names []string
	for len(names) < maxScan {
		batch, err := f.Readdirnames(1024)
		for _, n := range batch {
			// A name that is not UTF-8 is left out, as no path can name
			// it (and the wire carries names as protobuf strings, which
			// must be UTF-8: one such name would lose the whole list).
			if !reservedName(n) && utf8.ValidString(n) {
				names = append(names, n)
			}
		}
		if err != nil || len(batch) == 0 {
			break
		}
	}
	slices.Sort(names)
	truncated := len(names) > limit
	if truncated {
		names = names[:limit]
	}
	out := make([]DirEntry, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		e := DirEntry{Name: n, Type: "other"}
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			switch uint32(st.Mode) & unix.S_IFMT {
			case unix.S_IFREG:
				e.Type, e.Size = "file", st.Size
			case unix.S_IFDIR:
				e.Type = "dir"
			case unix.S_IFLNK:
				e.Type = "symlink"
			}
		}
		out = append(out, e)
	}
	return out, truncated, nil
}

// writeFile writes data to parts through a temporary file in the same
// directory: created O_EXCL|O_NOFOLLOW 0600, written, synced, renamed into
// place (create-only: never over an existing entry), parent synced. The
// target must be absent or a regular file with one link.
func (r *root) writeFile(op, path string, parts []string, data []byte, createOnly bool) error {
	dir, err := r.openDir(op, parts[:len(parts)-1])
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return writeAt(op, path, dir, parts[len(parts)-1], data, createOnly, 0o644, nil)
}

// writeAt is writeFile within an open directory. It reports the new
// file's identity to created, if set (inventory).
func writeAt(op, path string, dir int, leaf string, data []byte, createOnly bool, perm uint32, created func(dev, ino uint64)) error {
	var st unix.Stat_t
	switch err := unix.Fstatat(dir, leaf, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK:
		return fail(CodeLink, op, path, nil)
	case err == nil && createOnly:
		return fail(CodeExists, op, path, nil)
	case err == nil && uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG:
		return fail(CodeNotRegular, op, path, nil)
	case err == nil && st.Nlink != 1:
		return fail(CodeHardLinked, op, path, nil)
	case err != nil && !errors.Is(err, unix.ENOENT):
		return classify(op, path, err, dir, leaf)
	}
	tmp := tempPrefix + randomName()
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fail(CodeIO, op, path, err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Unlinkat(dir, tmp, 0)
		}
	}()
	f := os.NewFile(uintptr(fd), "workspace-temp")
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if werr == nil {
		werr = f.Chmod(os.FileMode(perm))
	}
	var tst unix.Stat_t
	if werr == nil {
		werr = unix.Fstat(fd, &tst)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fail(CodeIO, op, path, werr)
	}
	if createOnly {
		err = renameNoReplace(dir, tmp, leaf)
	} else {
		err = unix.Renameat(dir, tmp, dir, leaf)
	}
	if err != nil {
		return classify(op, path, err, dir, leaf)
	}
	ok = true
	if created != nil {
		created(uint64(tst.Dev), uint64(tst.Ino))
	}
	unix.Fsync(dir)
	return nil
}

// remove deletes a regular file (one link) or an empty directory; never
// recursively, never through a link.
func (r *root) remove(op, path string, parts []string) error {
	dir, err := r.openDir(op, parts[:len(parts)-1])
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	leaf := parts[len(parts)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(dir, leaf, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return classify(op, path, err, dir, leaf)
	}
	flag := 0
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Nlink != 1 {
			return fail(CodeHardLinked, op, path, nil)
		}
	case unix.S_IFDIR:
		flag = unix.AT_REMOVEDIR
	case unix.S_IFLNK:
		return fail(CodeLink, op, path, nil)
	default:
		return fail(CodeNotRegular, op, path, nil)
	}
	if err := unix.Unlinkat(dir, leaf, flag); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return fail(CodeNotEmpty, op, path, nil)
		}
		return classify(op, path, err, dir, leaf)
	}
	return nil
}
