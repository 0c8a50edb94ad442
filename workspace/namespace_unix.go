//go:build linux || darwin

package workspace

import (
	"errors"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// ident is an inventoried entry's identity.
type ident struct {
	dev, ino uint64
	mode     uint32 // S_IFREG or S_IFDIR
}

// namespace is a request's .iop/job/<id>/ directory and its inventory.
type namespace struct {
	requestID string
	job       int // .iop/job
	dir       int // .iop/job/<id>
	self      ident

	mu        sync.Mutex
	inventory map[string]ident // by name inside dir
}

// ensureDir makes (0700, if missing) and opens a directory beneath at,
// never through a link and never across a mount.
func (r *root) ensureDir(at int, name string) (int, error) {
	if err := unix.Mkdirat(at, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fail(CodeIO, "namespace", "", err)
	}
	fd, err := unix.Openat(at, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, classify("namespace", name, err, at, name)
	}
	if err := r.sameMount(fd); err != nil {
		unix.Close(fd)
		return -1, fail(CodeCrossesMount, "namespace", name, nil)
	}
	return fd, nil
}

// makeNamespace creates .iop/job/<requestID>/ (0700); the request id must
// not exist yet.
func (r *root) makeNamespace(requestID string) (*namespace, error) {
	iop, err := r.ensureDir(r.fd, ".iop")
	if err != nil {
		return nil, err
	}
	defer unix.Close(iop)
	job, err := r.ensureDir(iop, "job")
	if err != nil {
		return nil, err
	}
	if err := unix.Mkdirat(job, requestID, 0o700); err != nil {
		unix.Close(job)
		if errors.Is(err, unix.EEXIST) {
			return nil, fail(CodeExists, "namespace", namespacePath(requestID, ""), nil)
		}
		return nil, fail(CodeIO, "namespace", "", err)
	}
	dir, err := unix.Openat(job, requestID, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(job)
		return nil, classify("namespace", requestID, err, job, requestID)
	}
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		unix.Close(dir)
		unix.Close(job)
		return nil, fail(CodeIO, "namespace", "", err)
	}
	return &namespace{requestID: requestID, job: job, dir: dir, self: ident{uint64(st.Dev), uint64(st.Ino), unix.S_IFDIR},
		inventory: map[string]ident{}}, nil
}

func (n *namespace) write(name string, data []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return writeAt("artifact", name, n.dir, name, data, false, 0o600, func(dev, ino uint64) {
		n.inventory[name] = ident{dev, ino, unix.S_IFREG}
	})
}

func (n *namespace) read(name string, limit int64) ([]byte, error) {
	n.mu.Lock()
	want, ok := n.inventory[name]
	n.mu.Unlock()
	if !ok {
		return nil, fail(CodeNotFound, "artifact", name, nil)
	}
	fd, err := unix.Openat(n.dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, classify("artifact", name, err, n.dir, name)
	}
	f := os.NewFile(uintptr(fd), "artifact")
	defer f.Close()
	st, err := regularFile("artifact", name, fd)
	if err != nil {
		return nil, err
	}
	if uint64(st.Dev) != want.dev || uint64(st.Ino) != want.ino {
		return nil, fail(CodeRootChanged, "artifact", name, errors.New("not the file this request wrote"))
	}
	if st.Size > limit {
		return nil, fail(CodeTooLarge, "artifact", name, nil)
	}
	b := make([]byte, st.Size)
	if _, err := f.ReadAt(b, 0); err != nil && st.Size > 0 {
		return nil, fail(CodeIO, "artifact", name, err)
	}
	return b, nil
}

// cleanup removes inventoried entries whose identity still matches, then
// the request directory if nothing else is in it.
func (n *namespace) cleanup() (CleanupReport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer unix.Close(n.job)
	defer unix.Close(n.dir)
	var rep CleanupReport
	names, err := readNames(n.dir)
	if err != nil {
		return rep, fail(CodeIO, "cleanup", "", err)
	}
	slices.Sort(names)
	for _, name := range names {
		path := namespacePath(n.requestID, name)
		want, known := n.inventory[name]
		var st unix.Stat_t
		if !known || unix.Fstatat(n.dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil ||
			uint64(st.Dev) != want.dev || uint64(st.Ino) != want.ino || uint32(st.Mode)&unix.S_IFMT != want.mode {
			rep.Left = append(rep.Left, path)
			continue
		}
		if err := unix.Unlinkat(n.dir, name, 0); err != nil {
			rep.Left = append(rep.Left, path)
			continue
		}
		rep.Removed = append(rep.Removed, path)
	}
	dirPath := namespacePath(n.requestID, "")
	dirPath = dirPath[:len(dirPath)-1]
	var st unix.Stat_t
	switch {
	case len(rep.Left) > 0:
		rep.Left = append(rep.Left, dirPath)
	case unix.Fstatat(n.job, n.requestID, &st, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		uint64(st.Dev) != n.self.dev || uint64(st.Ino) != n.self.ino || uint32(st.Mode)&unix.S_IFMT != unix.S_IFDIR:
		rep.Left = append(rep.Left, dirPath)
	case unix.Unlinkat(n.job, n.requestID, unix.AT_REMOVEDIR) != nil:
		rep.Left = append(rep.Left, dirPath)
	default:
		rep.Removed = append(rep.Removed, dirPath)
	}
	return rep, nil
}

// readNames lists a directory by descriptor without taking it over.
func readNames(dir int) ([]string, error) {
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}
