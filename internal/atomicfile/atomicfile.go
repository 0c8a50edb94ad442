// Package atomicfile writes small files (keys, certificates, state) so that
// a crash or a failed write leaves the file as it was or as it is meant to
// be, never truncated or half written.
//
// The bytes go to a synced temporary file beside the target, which is then
// put in place and the directory synced: until it is, a power loss may
// bring the old file back. The temporary file has the final mode from the
// start, so a secret is never readable by others, even briefly, and a file
// replaced takes the new mode, not the old one's.
package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Write puts b at path with mode perm, replacing a file there.
func Write(path string, b []byte, perm fs.FileMode) error {
	return place(path, b, perm, os.Rename)
}

// Create puts b at path with mode perm only if nothing is there yet;
// otherwise it returns an error that matches fs.ErrExist and leaves the
// file alone. The temporary file is linked into place, never renamed over
// one, so of two processes creating the same file at once the second gets
// fs.ErrExist instead of replacing what the first may already have used.
// Where the filesystem has no hard links, it falls back to a rename after
// a check.
func Create(path string, b []byte, perm fs.FileMode) error {
	return place(path, b, perm, func(tmp, path string) error {
		err := os.Link(tmp, path)
		if err == nil || errors.Is(err, fs.ErrExist) {
			return err
		}
		if _, serr := os.Lstat(path); serr == nil {
			return &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
		}
		return os.Rename(tmp, path)
	})
}

func place(path string, b []byte, perm fs.FileMode, put func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a link or a failure; gone after a rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := put(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes a rename or a link in dir durable. Windows cannot sync a
// directory through os, so there the change is as durable as the
// filesystem makes it; elsewhere a failure is returned.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
