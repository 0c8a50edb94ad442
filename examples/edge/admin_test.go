package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/internal/testpki"
)

// ca runs `edge ca ARGS...` and returns its output.
func ca(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := subcommand(append([]string{"ca"}, args...), &out)
	return out.String(), err
}

// snapshot reads every file in dir, by name.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

func leaf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestCA runs the CA subcommands an operator would: init, issue, sign,
// and the mistakes that must change nothing.
func TestCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	if _, err := ca(t, "init", "-dir", dir, "-trust-domain", "iop.test"); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, filepath.Join(dir, "ca.key")); m != 0o600 {
		t.Fatalf("ca.key mode %v", m)
	}
	root, err := identity.LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}

	// issue: a fresh key and a certificate naming the workload.
	out, err := ca(t, "issue", "-dir", dir, "-kind", "node", "-id", "gpu-box", "-days", "30")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "spiffe://iop.test/node/gpu-box") {
		t.Fatalf("issue printed %q", out)
	}
	c := leaf(t, filepath.Join(dir, "gpu-box.crt"))
	if _, err := c.Verify(x509.VerifyOptions{Roots: root.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("issued certificate: %v", err)
	}
	if got := c.NotAfter.Sub(c.NotBefore); got != 30*24*time.Hour {
		t.Fatalf("lifetime %v, want 30 days", got)
	}
	if m := mode(t, filepath.Join(dir, "gpu-box.key")); m != 0o600 {
		t.Fatalf("issued key mode %v", m)
	}

	// sign: the certificate is for the request's key.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	csrPath := filepath.Join(t.TempDir(), "edge-a.csr")
	os.WriteFile(csrPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), 0o644)
	if _, err := ca(t, "sign", "-dir", dir, "-kind", "edge", "-id", "edge-a", "-csr", csrPath, "-dns", "edge.example"); err != nil {
		t.Fatal(err)
	}
	if c := leaf(t, filepath.Join(dir, "edge-a.crt")); !key.PublicKey.Equal(c.PublicKey) {
		t.Fatal("the signed certificate is not for the request's key")
	}
	if _, err := os.Stat(filepath.Join(dir, "edge-a.key")); err == nil {
		t.Fatal("sign wrote a key: the key stays with its owner")
	}

	// Mistakes: each refused with a message naming it, the CA directory
	// left exactly as it was.
	before := snapshot(t, dir)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "-dir", dir, "-trust-domain", "iop.test"}, "refusing to replace a CA"},
		// Issuing to the id "ca" would write over the CA's own key.
		{[]string{"issue", "-dir", dir, "-id", "ca"}, "would be the CA's"},
		{[]string{"sign", "-dir", dir, "-id", "ca", "-csr", csrPath}, "would be the CA's"},
		{[]string{"issue", "-dir", dir, "-id", "CA"}, "would be the CA's"},
		{[]string{"issue", "-dir", dir, "-id", "../escape"}, `invalid name: id "../escape"`},
		{[]string{"issue", "-dir", dir, "-id", "n1", "-kind", "admin"}, "unknown kind"},
		{[]string{"issue", "-dir", dir, "-id", "n1", "-ip", "not-an-ip"}, "not an IP address"},
		{[]string{"issue", "-dir", dir}, "-id is required"},
		{[]string{"issue", "-dir", dir, "-id", "n1", "-days", "0"}, "-days 0"},
		{[]string{"issue", "-dir", dir, "-id", "n1", "-days", "-7"}, "-days -7"},
		{[]string{"issue", "-dir", dir, "-id", "n1", "-days", "200000"}, "-days 200000"},
		// A value without its flag, or a flag the subcommand does not
		// take, must not run as something else.
		{[]string{"issue", "-dir", dir, "n1"}, `unexpected argument "n1"`},
		{[]string{"issue", "-dir", dir, "-id", "n1", "-csr", csrPath}, "does not take -csr"},
		{[]string{"init", "-dir", dir, "-trust-domain", "iop.test", "-days", "5"}, "does not take -days"},
		{[]string{"sign", "-dir", dir, "-id", "n1"}, "-csr is required"},
		{[]string{"sign", "-dir", dir, "-id", "n1", "-csr", filepath.Join(dir, "ca.crt")}, "invalid certificate request"},
		{[]string{"renew", "-dir", dir}, "unknown"},
		{nil, "init, issue or sign"},
	} {
		_, err := ca(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ca %q: %v, want an error containing %q", tc.args, err, tc.want)
		}
		if after := snapshot(t, dir); !equalFiles(before, after) {
			t.Fatalf("ca %q changed the CA directory", tc.args)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.crt")); err == nil {
		t.Fatal("an id with a path wrote outside the CA directory")
	}
	if _, err := identity.LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")); err != nil {
		t.Fatalf("the CA no longer loads: %v", err)
	}
}

func equalFiles(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// minimalEdge is a valid edge.yaml.
const minimalEdge = `
api: {listen: "127.0.0.1:0"}
nodes_listen: "127.0.0.1:0"
state_dir: state
api_keys:
  - name: a
    key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}
    models: ["*"]
nodes:
  - id: n1
    token: {sha256: 0000000000000000000000000000000000000000000000000000000000000002}
    providers:
      - {id: p1, adapter: openai, category: local, models: [m], capacity: 1}
routes:
  - model: pub
    targets: [{provider: p1, model: m}]
`

func TestLeaseKey(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	os.WriteFile(cfg, []byte(minimalEdge), 0o644)
	var first, second bytes.Buffer
	if err := subcommand([]string{"lease-key", "-config", cfg}, &first); err != nil {
		t.Fatal(err)
	}
	if err := subcommand([]string{"lease-key", "-config", cfg}, &second); err != nil {
		t.Fatal(err)
	}
	if first.String() != second.String() || !strings.Contains(first.String(), "public_key: ") {
		t.Fatalf("lease-key printed %q, then %q: want one key, the same both times", first.String(), second.String())
	}
	priv, err := credentiallease.LoadOrCreateSigningKey(filepath.Join(dir, "state", "lease-signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	if id := credentiallease.KeyID(priv.Public().(ed25519.PublicKey)); !strings.Contains(first.String(), "id: "+id) {
		t.Fatalf("lease-key printed %q, the key on disk is %s", first.String(), id)
	}
	if err := subcommand([]string{"lease-key", cfg}, &first); err == nil || !strings.Contains(err.Error(), "unexpected argument") {
		t.Fatalf("lease-key with the path but no -config: %v", err)
	}
}

// TestCheck: `edge check` accepts a valid file and prints what it
// configures, refuses an invalid one with the reason, and writes nothing
// either way (no state directory, epoch or lease-signing key, even with
// credentials to lease).
func TestCheck(t *testing.T) {
	t.Setenv("IOP_TEST_UPSTREAM", "sk-upstream-0123456789abcdef")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	valid := strings.Replace(minimalEdge, "capacity: 1}", "capacity: 1, credential: up}", 1) +
		"credentials:\n  - {id: up, revision: 1, secret: {env: IOP_TEST_UPSTREAM}}\n"
	os.WriteFile(cfg, []byte(valid), 0o644)
	var out bytes.Buffer
	if err := subcommand([]string{"check", "-config", cfg}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{cfg + " is valid.", "nodes        1, with 1 providers", "routes       1", "credentials  1", "metrics      /metrics open to whoever reaches the api listener"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check printed:\n%s\nwant it to include %q", out.String(), want)
		}
	}
	if strings.Contains(out.String(), "admission") {
		t.Errorf("check printed an aging step for keys of one priority:\n%s", out.String())
	}
	// Keys of priorities 0 and 10: the aging step in effect, derived
	// (30 s / 20) or set.
	prio := strings.Replace(valid, `models: ["*"]`, "models: [\"*\"]\n  - name: b\n    key: {sha256: 0000000000000000000000000000000000000000000000000000000000000003}\n    models: [pub]\n    priority: 10", 1)
	for doc, want := range map[string]string{
		prio:                                "admission    priorities 0 to 10; a waiting request climbs one every 1.5s (derived from them and the queue timeout)",
		prio + "limits: {aging_step: 2s}\n": "admission    priorities 0 to 10; a waiting request climbs one every 2s (limits.aging_step)",
	} {
		os.WriteFile(cfg, []byte(doc), 0o644)
		out.Reset()
		if err := subcommand([]string{"check", "-config", cfg}, &out); err != nil || !strings.Contains(out.String(), want) {
			t.Errorf("check: %v, printed:\n%s\nwant it to include %q", err, out.String(), want)
		}
	}
	os.WriteFile(cfg, []byte(valid), 0o644)
	if _, err := os.Lstat(filepath.Join(dir, "state")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("check made the state directory: %v", err)
	}
	// With the state directory there (as on a running Edge), the key it
	// lacks is not created either.
	os.Mkdir(filepath.Join(dir, "state"), 0o700)
	if err := subcommand([]string{"check", "-config", cfg}, &out); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ doc, want string }{
		{strings.Replace(valid, `nodes_listen: "127.0.0.1:0"`, `nodes_listen: "9440"`, 1), `nodes_listen "9440" is not a host:port`},
		{strings.Replace(valid, "key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}", "key: {env: IOP_TEST_UNSET}", 1), "api_keys[0].key: $IOP_TEST_UNSET is unset"},
		{strings.Replace(valid, "provider: p1", "provider: p2", 1), "unknown provider"},
		{valid + "gpus: 8\n", `unknown key "gpus"`},
	} {
		os.WriteFile(cfg, []byte(tc.doc), 0o644)
		if err := subcommand([]string{"check", "-config", cfg}, &out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check: %v, want it to mention %q", err, tc.want)
		}
	}
	if err := subcommand([]string{"check", cfg}, &out); err == nil || !strings.Contains(err.Error(), "unexpected argument") {
		t.Errorf("check with the path but no -config: %v", err)
	}
	// The API's certificate: its end is printed; one that has ended
	// fails the check.
	pki := testpki.NewCA(t, "check test CA")
	for name, notAfter := range map[string]time.Time{"fresh": time.Now().Add(30 * 24 * time.Hour), "ended": time.Now().Add(-time.Hour)} {
		c := pki.Issue(t, testpki.Leaf{NotAfter: notAfter})
		key, _ := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
		os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600)
		os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600)
	}
	withTLS := func(name string) string {
		return strings.Replace(valid, `api: {listen: "127.0.0.1:0"}`, `api: {listen: "127.0.0.1:0", tls: {cert_file: `+name+`.crt, key_file: `+name+`.key}}`, 1)
	}
	os.WriteFile(cfg, []byte(withTLS("fresh")), 0o644)
	out.Reset()
	if err := subcommand([]string{"check", "-config", cfg}, &out); err != nil || !strings.Contains(out.String(), "api          127.0.0.1:0 (TLS)") || !strings.Contains(out.String(), "certificate  api.tls until ") {
		t.Errorf("check with api.tls: %v\n%s", err, out.String())
	}
	os.WriteFile(cfg, []byte(withTLS("ended")), 0o644)
	if err := subcommand([]string{"check", "-config", cfg}, &out); err == nil || !strings.Contains(err.Error(), "api.tls: the certificate ended on ") {
		t.Errorf("check with an ended api.tls certificate: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "state"))
	if len(ents) > 0 {
		t.Errorf("check wrote %v", ents)
	}
}
