package identity_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"

	"github.com/iop-dev/iop/edge/identity"
)

// An Edge CA issues a Node's workload certificate; the identity is read
// back from the certificate the way the Edge reads it from a verified TLS
// peer.
func Example() {
	ca, err := identity.NewCA("iop.example", 0)
	if err != nil {
		panic(err)
	}
	certPEM, _, err := ca.Issue(identity.KindNode, "gpu-box", identity.Options{})
	if err != nil {
		panic(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, _ := x509.ParseCertificate(block.Bytes)
	fmt.Println(cert.URIs[0])
	id, err := identity.CertID(cert, "iop.example", identity.KindNode)
	fmt.Println(id, err)
	_, err = identity.CertID(cert, "iop.example", identity.KindEdge)
	fmt.Println(err != nil)
	// Output:
	// spiffe://iop.example/node/gpu-box
	// gpu-box <nil>
	// true
}
