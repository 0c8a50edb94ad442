// Package config reads the daemons' YAML files, edge.yaml and node.yaml,
// strictly (an unknown key is an error naming its line), validates them
// naming the field, and turns them into the library's Go configuration. The
// ownership split is the architecture's: edge.yaml holds identity (Nodes,
// providers, capacity, routes, keys); node.yaml holds local facts
// (endpoints, local credentials, CLI templates) and the allow-lists.
// Secrets are never inline: they come from files or environment variables,
// or appear only as SHA-256 hashes.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/workspace"
)

// decodeStrict decodes exactly one YAML document into v, refusing unknown
// keys: every one is reported (an *UnknownKeyError each, joined), with
// its line, its section and the key it likely meant.
func decodeStrict(b []byte, v any) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty document")
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	if unknown := unknownKeys(&doc, reflect.TypeOf(v), "", nil); len(unknown) > 0 {
		errs := make([]error, len(unknown))
		for i, e := range unknown {
			errs[i] = e
		}
		return errors.Join(errs...)
	}
	// yaml.v3's own check stays, behind ours: a key ours let through is
	// still refused, if less legibly.
	dec = yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// Secret names where a secret comes from: exactly one of a SHA-256 hash
// (hex), a file, or an environment variable.
type Secret struct {
	SHA256 string `yaml:"sha256"`
	File   string `yaml:"file"`
	Env    string `yaml:"env"`
}

// minSecretLen is the shortest secret accepted from a file or the
// environment: 22 characters carry 128 bits when random base64url.
const minSecretLen = 22

// hash returns the SHA-256 of the secret, reading it if needed.
func (s Secret) hash(base string) ([32]byte, error) {
	var zero [32]byte
	n := 0
	for _, v := range []string{s.SHA256, s.File, s.Env} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return zero, errors.New("exactly one of sha256, file, env is required")
	}
	if s.SHA256 != "" {
		b, err := hex.DecodeString(s.SHA256)
		if err != nil || len(b) != 32 {
			return zero, errors.New("sha256 must be 64 hex digits")
		}
		return [32]byte(b), nil
	}
	v, err := s.read(base)
	if err != nil {
		return zero, err
	}
	if len(v) < minSecretLen {
		return zero, fmt.Errorf("secret shorter than %d characters (use at least 128 random bits)", minSecretLen)
	}
	return sha256.Sum256([]byte(v)), nil
}

// read returns the secret's value from its file or variable.
func (s Secret) read(base string) (string, error) {
	switch {
	case s.File != "":
		b, err := readSmall(resolve(base, s.File), maxSecretFile)
		if err != nil {
			return "", fmt.Errorf("file: %v", errors.Unwrap(err))
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("file %s is empty", s.File)
		}
		return v, nil
	case s.Env != "":
		v := strings.TrimSpace(os.Getenv(s.Env))
		if v == "" {
			return "", fmt.Errorf("$%s is unset or empty", s.Env)
		}
		return v, nil
	}
	return "", errors.New("no file or env given")
}

// source returns the secret as a credential read at use time: a file or
// an environment variable (a hash cannot be presented to an upstream).
func (s Secret) source(base string) (execution.Credential, error) {
	switch {
	case s.File != "" && s.Env == "" && s.SHA256 == "":
		return execution.FileCredential(resolve(base, s.File)), nil
	case s.Env != "" && s.File == "" && s.SHA256 == "":
		return execution.EnvCredential(s.Env), nil
	}
	return nil, errors.New("exactly one of file or env is required")
}

// checkAddr checks that addr, the value of the setting name, is a
// host:port (the host may be empty to listen on every interface; the port
// a number or a service name), as net.Listen and net.Dial take it: a bare
// port or host is refused here instead of when the daemon starts.
func checkAddr(name, addr string) error {
	if addr == "" {
		return fmt.Errorf("%s is required", name)
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil && port == "" {
		err = errors.New("missing port")
	}
	if err != nil {
		return fmt.Errorf("%s %q is not a host:port (%v)", name, addr, unwrapAddrErr(err))
	}
	return nil
}

// unwrapAddrErr is what net.SplitHostPort's error says, without the
// address it repeats.
func unwrapAddrErr(err error) string {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return ae.Err
	}
	return err.Error()
}

// resolve makes a relative path relative to the config file's directory.
func resolve(base, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(base, p)
}

func readFile(path string) ([]byte, string, error) {
	b, err := readSmall(path, 4<<20)
	if err != nil {
		return nil, "", err
	}
	return b, filepath.Dir(path), nil
}

// Size bounds of the files a configuration names.
const (
	maxSecretFile = 64 << 10
	maxPEMFile    = 1 << 20
)

// readSmall reads a regular file of at most limit bytes. Anything else (a
// device such as /dev/zero, a FIFO, a directory, a larger file) is an
// error, so a configuration can never make a loader block or read
// without end.
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// WorkspaceLimits is the limits block of a workspace (edge.yaml and
// node.yaml); every field is required.
type WorkspaceLimits struct {
	ReadBytes      int64         `yaml:"read_bytes"`
	ListEntries    int           `yaml:"list_entries"`
	WriteBytes     int64         `yaml:"write_bytes"`
	CommandTimeout time.Duration `yaml:"command_timeout"`
	OutputBytes    int64         `yaml:"output_bytes"`
}

func (l WorkspaceLimits) limits() workspace.Limits {
	return workspace.Limits{ReadBytes: l.ReadBytes, ListEntries: l.ListEntries, WriteBytes: l.WriteBytes, CommandTimeout: l.CommandTimeout, OutputBytes: l.OutputBytes}
}

func ops(names []string) []workspace.Op {
	out := make([]workspace.Op, 0, len(names))
	for _, n := range names {
		out = append(out, workspace.Op(n))
	}
	return out
}
