package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/internal/config"
	"github.com/iop-dev/iop/internal/testpki"
)

func writePair(t *testing.T, dir string, cert tls.Certificate) {
	t.Helper()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "hub.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600)
	os.WriteFile(filepath.Join(dir, "hub.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600)
}

// TestReload: SIGHUP's reload takes a renewed http.tls certificate, logs
// the settings that wait for a restart, and refuses (changing nothing) a
// hub.yaml that turns HTTPS off or names a broken certificate.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hub.yaml")
	t.Setenv("TEST_OPERATOR_TOKEN", "op-token-0123456789abcdef0123456789")
	yaml := func(listen, httpTLS string) string {
		return "edges_listen: 127.0.0.1:0\nhttp: {listen: " + listen + httpTLS + "}\n" +
			"operators:\n  - {name: ops, token: {env: TEST_OPERATOR_TOKEN}}\n"
	}
	const withTLS = ", tls: {cert_file: hub.crt, key_file: hub.key}"
	ca := testpki.NewCA(t, "hub")
	first := ca.Issue(t, testpki.Leaf{})
	writePair(t, dir, first)
	os.WriteFile(path, []byte(yaml("127.0.0.1:0", withTLS)), 0o600)

	started, err := config.LoadHub(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := started.Config()
	hub, err := controlplane.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	tc, _ := started.HTTPTLS()
	var current atomic.Pointer[tls.Config]
	current.Store(tc)
	var logged bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logged})
	serving := func() []byte { return current.Load().Certificates[0].Certificate[0] }

	renewed := ca.Issue(t, testpki.Leaf{})
	writePair(t, dir, renewed)
	os.WriteFile(path, []byte(yaml("127.0.0.1:9999", withTLS)), 0o600)
	if err := reload(hub, path, started, &current, log); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(serving(), renewed.Certificate[0]) {
		t.Fatal("the renewed certificate is not served")
	}
	if !strings.Contains(logged.String(), "take effect only at restart") || !strings.Contains(logged.String(), "http.listen") {
		t.Fatalf("the http.listen change was not logged: %s", logged.String())
	}

	for name, doc := range map[string]string{
		"https turned off":     yaml("127.0.0.1:0", ""),
		"a broken key":         yaml("127.0.0.1:0", ", tls: {cert_file: hub.crt, key_file: hub.yaml}"),
		"not yaml":             "edges_listen: [",
		"operator_mtls, no CA": yaml("127.0.0.1:0", withTLS) + "operator_mtls: true\n",
	} {
		os.WriteFile(path, []byte(doc), 0o600)
		if err := reload(hub, path, started, &current, log); err == nil {
			t.Errorf("%s: reload accepted", name)
		}
		if !bytes.Equal(serving(), renewed.Certificate[0]) {
			t.Fatalf("%s: a refused reload changed the certificate", name)
		}
	}
}
