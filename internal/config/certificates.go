package config

import (
	"fmt"
	"io"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
)

// Certificate is a certificate a configuration file presents (cert_file):
// the setting that names it and when it ends.
type Certificate struct {
	Setting  string
	NotAfter time.Time
}

// ServerMode says how a listener configured with t takes connections:
// "plaintext" (t is nil), "TLS", or "mutual TLS" (with client_ca_file).
func (t *TLSFiles) ServerMode() string {
	switch {
	case t == nil:
		return "plaintext"
	case t.ClientCA != "":
		return "mutual TLS"
	}
	return "TLS"
}

// certificate reads t's certificate, if t names one.
func (t *TLSFiles) certificate(dir, setting string) ([]Certificate, error) {
	if t == nil || t.CertFile == "" {
		return nil, nil
	}
	c, err := loadKeyPair(resolve(dir, t.CertFile), resolve(dir, t.KeyFile))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	return []Certificate{{Setting: setting, NotAfter: c.Leaf.NotAfter}}, nil
}

// setting is a TLS section of a file and its name there.
type setting struct {
	name string
	t    *TLSFiles
}

// certificates gathers the certificates of settings, in order.
func certificates(dir string, settings ...setting) ([]Certificate, error) {
	var out []Certificate
	for _, s := range settings {
		c, err := s.t.certificate(dir, s.name)
		if err != nil {
			return nil, err
		}
		out = append(out, c...)
	}
	return out, nil
}

// Certificates returns the certificates edge.yaml presents: api.tls,
// node_tls and control_plane.tls.
func (f *EdgeFile) Certificates() ([]Certificate, error) {
	var cp *TLSFiles
	if f.ControlPlane != nil {
		cp = f.ControlPlane.TLS
	}
	return certificates(f.dir, setting{"api.tls", f.API.TLS}, setting{"node_tls", f.NodeTLS}, setting{"control_plane.tls", cp})
}

// Certificates returns the certificate node.yaml presents: tls.
func (f *NodeFile) Certificates() ([]Certificate, error) {
	return certificates(f.dir, setting{"tls", f.TLS})
}

// Certificates returns the certificates hub.yaml presents: http.tls and
// edge_tls.
func (f *HubFile) Certificates() ([]Certificate, error) {
	return certificates(f.dir, setting{"http.tls", f.HTTP.TLS}, setting{"edge_tls", f.EdgeTLS})
}

// ReportCertificates prints a line per certificate f presents (an
// *EdgeFile, *NodeFile or *HubFile) with its end, marked when it is within
// nodes.CertificateWarning of now, and returns an error naming the first
// that has ended (a daemon would start with it, and every handshake would
// fail), or one that does not load.
func ReportCertificates(out io.Writer, f interface{ Certificates() ([]Certificate, error) }, now time.Time) error {
	certs, err := f.Certificates()
	if err != nil {
		return err
	}
	var ended error
	for _, c := range certs {
		left := c.NotAfter.Sub(now)
		day := c.NotAfter.UTC().Format(time.DateOnly)
		switch {
		case left <= 0:
			fmt.Fprintf(out, "  certificate  %s ENDED on %s\n", c.Setting, day)
			if ended == nil {
				ended = fmt.Errorf("%s: the certificate ended on %s", c.Setting, day)
			}
		case left < nodes.CertificateWarning:
			fmt.Fprintf(out, "  certificate  %s until %s: ENDS IN %d DAYS, renew it\n", c.Setting, day, int(left.Hours()/24))
		default:
			fmt.Fprintf(out, "  certificate  %s until %s (%d days)\n", c.Setting, day, int(left.Hours()/24))
		}
	}
	return ended
}
