package credentiallease

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/hpke"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/iop-dev/iop/internal/atomicfile"
)

// kem is the suite's key encapsulation: DHKEM(X25519, HKDF-SHA256).
func kem() hpke.KEM { return hpke.DHKEM(ecdh.X25519()) }

// KeyID names a public key: the first 16 bytes of its SHA-256, in hex.
func KeyID(public []byte) string {
	sum := sha256.Sum256(public)
	return hex.EncodeToString(sum[:16])
}

// NodeKey is a Node's lease encryption key. The private part never leaves
// the Node: only PublicKey is registered with the Edge.
type NodeKey struct {
	priv hpke.PrivateKey
	pub  []byte
	id   string
}

// GenerateNodeKey makes a fresh X25519 key.
func GenerateNodeKey() (*NodeKey, error) {
	priv, err := kem().GenerateKey()
	if err != nil {
		return nil, err
	}
	return nodeKeyFrom(priv), nil
}

func nodeKeyFrom(priv hpke.PrivateKey) *NodeKey {
	pub := priv.PublicKey().Bytes()
	return &NodeKey{priv: priv, pub: pub, id: KeyID(pub)}
}

// PublicKey returns the X25519 public key to register.
func (k *NodeKey) PublicKey() []byte { return append([]byte(nil), k.pub...) }

// ID returns the key id leases name as their recipient key.
func (k *NodeKey) ID() string { return k.id }

// ErrKeyFile is returned for a key file that is not a private 32-byte key
// readable by its owner only.
var ErrKeyFile = errors.New("credentiallease: unusable key file")

// LoadOrCreateNodeKey reads the Node's key from path, or creates it (mode
// 0600, written atomically) when the file does not exist. A file readable
// by group or others, or of the wrong size, is refused, never repaired.
func LoadOrCreateNodeKey(path string) (*NodeKey, error) {
	raw, err := readKeyFile(path, 32)
	if errors.Is(err, fs.ErrNotExist) {
		k, cerr := newNodeKeyFile(path, createKeyFile)
		if !errors.Is(cerr, fs.ErrExist) {
			return k, cerr
		}
		// Another process created it first: its key is the one.
		raw, err = readKeyFile(path, 32)
	}
	if err != nil {
		return nil, err
	}
	priv, err := kem().NewPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKeyFile, path, err)
	}
	return nodeKeyFrom(priv), nil
}

// RotateNodeKey writes a fresh key to path (replacing any) and returns it.
// Leases sealed to an old key stop opening at once.
func RotateNodeKey(path string) (*NodeKey, error) {
	return newNodeKeyFile(path, writeKeyFile)
}

// newNodeKeyFile makes a fresh key and stores it at path with write
// (writeKeyFile replaces a file there, createKeyFile fails with
// fs.ErrExist).
func newNodeKeyFile(path string, write func(string, []byte) error) (*NodeKey, error) {
	k, err := GenerateNodeKey()
	if err != nil {
		return nil, err
	}
	b, err := k.priv.Bytes()
	if err != nil {
		return nil, err
	}
	if err := write(path, b); err != nil {
		return nil, err
	}
	return k, nil
}

// LoadOrCreateSigningKey reads the Edge's Ed25519 lease-signing key seed
// from path, or creates it (mode 0600) when missing.
func LoadOrCreateSigningKey(path string) (ed25519.PrivateKey, error) {
	seed, err := readKeyFile(path, ed25519.SeedSize)
	if errors.Is(err, fs.ErrNotExist) {
		_, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return nil, gerr
		}
		switch cerr := createKeyFile(path, priv.Seed()); {
		case cerr == nil:
			return priv, nil
		case !errors.Is(cerr, fs.ErrExist):
			return nil, cerr
		}
		// Another process created it first (an Edge starting while
		// `edge lease-key` runs): its key is the one.
		seed, err = readKeyFile(path, ed25519.SeedSize)
	}
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func readKeyFile(path string, size int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrKeyFile, path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v; it must be readable by its owner only (chmod 600)", ErrKeyFile, path, st.Mode().Perm())
	}
	if st.Size() != int64(size) {
		return nil, fmt.Errorf("%w: %s is %d bytes, want %d", ErrKeyFile, path, st.Size(), size)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKeyFile, path, err)
	}
	return b, nil
}

// writeKeyFile writes b to path with mode 0600 (package atomicfile), so a
// crash leaves the old key or the new one: with a replay file, a power loss
// that brought the old file back would forget the uses appended to the new
// one after it.
func writeKeyFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}

// createKeyFile is writeKeyFile for a file that must not exist yet: of two
// processes creating the same key at once the second gets fs.ErrExist (and
// reads the first's) instead of replacing a key the first has already
// handed out.
func createKeyFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Create(path, b, 0o600)
}
