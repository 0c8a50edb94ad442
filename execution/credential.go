package execution

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// Credential yields the secret for one upstream call. It is read at the
// time of the call (so a rotated file takes effect without a restart) and
// must never be logged, formatted or sent anywhere but the upstream.
type Credential interface {
	Secret(ctx context.Context) (string, error)
}

// ErrNoCredential is returned when a credential source is empty or missing.
var ErrNoCredential = errors.New("execution: credential unavailable")

// FileCredential reads the secret from a file (trailing whitespace
// trimmed), such as a mounted secret.
type FileCredential string

// Secret implements Credential.
func (f FileCredential) Secret(context.Context) (string, error) {
	b, err := readSecretFile(string(f))
	if err != nil {
		// The path is the operator's own configuration; the content is
		// never part of an error.
		return "", fmt.Errorf("%w: %s: %v", ErrNoCredential, string(f), err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrNoCredential, string(f))
	}
	return s, nil
}

// String never shows the secret.
func (f FileCredential) String() string { return "file:" + string(f) }

// maxSecretFile bounds a credential file.
const maxSecretFile = 64 << 10

// readSecretFile reads a regular file of at most maxSecretFile bytes: a
// device or FIFO named by mistake can never block or flood a call.
func readSecretFile(path string) ([]byte, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, errors.Unwrap(err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case st.Size() > maxSecretFile:
		return nil, errors.New("larger than 64 KiB")
	}
	return io.ReadAll(io.LimitReader(fh, maxSecretFile))
}

// EnvCredential reads the secret from an environment variable.
type EnvCredential string

// Secret implements Credential.
func (e EnvCredential) Secret(context.Context) (string, error) {
	s := strings.TrimSpace(os.Getenv(string(e)))
	if s == "" {
		return "", fmt.Errorf("%w: $%s is unset or empty", ErrNoCredential, string(e))
	}
	return s, nil
}

// String never shows the secret.
func (e EnvCredential) String() string { return "env:" + string(e) }

type leasedKey struct{}

// WithLeasedSecret returns ctx carrying the secret a credential lease
// opened for one provider call. An adapter uses it instead of its own
// Credential, never alongside: the Node sets it only for a provider whose
// credential is leased, and refuses the call when no valid lease came.
// The caller clears secret after the call.
func WithLeasedSecret(ctx context.Context, secret []byte) context.Context {
	return context.WithValue(ctx, leasedKey{}, secret)
}

// LeasedSecret returns the leased secret ctx carries, if any.
func LeasedSecret(ctx context.Context) ([]byte, bool) {
	s, ok := ctx.Value(leasedKey{}).([]byte)
	return s, ok && len(s) > 0
}
