package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/internal/atomicfile"
	"github.com/iop-dev/iop/internal/config"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return fmt.Sprint(*l) }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// maxDays bounds -days: a hundred years, far below where a duration
// overflows.
const maxDays = 36500

// parse parses a subcommand's flags and refuses anything left over: a
// stray word (a value without its flag) must not run with a default.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (every value goes with a flag; -h lists them)", fs.Name(), fs.Arg(0))
	}
	return nil
}

// caFlags are the flags each ca subcommand takes.
var caFlags = map[string][]string{
	"init":  {"dir", "trust-domain"},
	"issue": {"dir", "kind", "id", "days", "dns", "ip"},
	"sign":  {"dir", "kind", "id", "days", "csr", "dns", "ip"},
}

// subcommand runs `ca ...`, `lease-key` or `check`.
func subcommand(args []string, out io.Writer) error {
	if args[0] == "check" {
		fs := flag.NewFlagSet("check", flag.ContinueOnError)
		path := fs.String("config", "edge.yaml", "path to edge.yaml")
		if err := parse(fs, args[1:]); err != nil {
			return err
		}
		return check(*path, out)
	}
	if args[0] == "lease-key" {
		fs := flag.NewFlagSet("lease-key", flag.ContinueOnError)
		path := fs.String("config", "edge.yaml", "path to edge.yaml")
		if err := parse(fs, args[1:]); err != nil {
			return err
		}
		f, err := config.LoadEdge(*path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(f.StatePath(""), 0o700); err != nil {
			return err
		}
		key, err := credentiallease.LoadOrCreateSigningKey(f.LeaseKeyPath())
		if err != nil {
			return err
		}
		pub := key.Public().(ed25519.PublicKey)
		fmt.Fprintf(out, "# node.yaml, leases.edge_keys:\n- id: %s\n  public_key: %s\n", credentiallease.KeyID(pub), base64.StdEncoding.EncodeToString(pub))
		return nil
	}
	if len(args) < 2 {
		return errors.New("ca: init, issue or sign")
	}
	takes, known := caFlags[args[1]]
	if !known {
		return fmt.Errorf("ca %s: unknown (init, issue or sign)", args[1])
	}
	fs := flag.NewFlagSet("ca "+args[1], flag.ContinueOnError)
	dir := fs.String("dir", "ca", "the CA directory (ca.crt, ca.key; issued files go here too)")
	td := fs.String("trust-domain", "", "SPIFFE trust domain (init)")
	kind := fs.String("kind", "node", "node or edge")
	id := fs.String("id", "", "the node or edge id")
	days := fs.Int("days", 90, "certificate lifetime in days")
	csr := fs.String("csr", "", "certificate request file (sign)")
	var dns, ips listFlag
	fs.Var(&dns, "dns", "a DNS name the certificate serves (repeatable; makes it a server certificate too)")
	fs.Var(&ips, "ip", "an IP address the certificate serves (repeatable)")
	if err := parse(fs, args[2:]); err != nil {
		return err
	}
	var stray []string
	fs.Visit(func(f *flag.Flag) {
		if !slices.Contains(takes, f.Name) {
			stray = append(stray, "-"+f.Name)
		}
	})
	if len(stray) > 0 {
		// Ignoring one would do something else than asked (issue with
		// -csr makes a new key instead of signing the request).
		return fmt.Errorf("ca %s does not take %s", args[1], strings.Join(stray, ", "))
	}
	if *days < 1 || *days > maxDays {
		return fmt.Errorf("-days %d: from 1 to %d (a certificate also ends with its CA)", *days, maxDays)
	}
	caCert, caKey := filepath.Join(*dir, "ca.crt"), filepath.Join(*dir, "ca.key")
	switch args[1] {
	case "init":
		if *td == "" {
			return errors.New("ca init: -trust-domain is required")
		}
		if _, err := os.Stat(caKey); err == nil {
			return fmt.Errorf("ca init: %s exists; refusing to replace a CA", caKey)
		}
		ca, err := identity.NewCA(*td, 0)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(*dir, 0o700); err != nil {
			return err
		}
		if err := ca.Save(caCert, caKey); err != nil {
			return err
		}
		fmt.Fprintf(out, "CA for trust domain %s: %s (give to peers), %s (keep private)\n", *td, caCert, caKey)
		return nil
	case "issue", "sign":
		ca, err := identity.LoadCA(caCert, caKey)
		if err != nil {
			return err
		}
		if *id == "" {
			return errors.New("-id is required")
		}
		certPath, keyPath := filepath.Join(*dir, *id+".crt"), filepath.Join(*dir, *id+".key")
		if strings.EqualFold(certPath, caCert) || strings.EqualFold(keyPath, caKey) {
			// Issuing to them would write over the CA's own key (on a
			// case-insensitive filesystem, "CA" names them too).
			return fmt.Errorf("-id %q: its files would be the CA's (%s, %s); choose another id", *id, caCert, caKey)
		}
		opt := identity.Options{Validity: time.Duration(*days) * 24 * time.Hour, DNSNames: dns}
		for _, s := range ips {
			ip := net.ParseIP(s)
			if ip == nil {
				return fmt.Errorf("-ip %q is not an IP address", s)
			}
			opt.IPAddresses = append(opt.IPAddresses, ip)
		}
		if args[1] == "sign" {
			if *csr == "" {
				return errors.New("ca sign: -csr is required")
			}
			b, err := os.ReadFile(*csr)
			if err != nil {
				return err
			}
			certPEM, err := ca.SignCSR(b, identity.Kind(*kind), *id, opt)
			if err != nil {
				return err
			}
			if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: %s\n", identity.ID(ca.TrustDomain, identity.Kind(*kind), *id), certPath)
			return nil
		}
		certPEM, keyPEM, err := ca.Issue(identity.Kind(*kind), *id, opt)
		if err != nil {
			return err
		}
		if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
			return err
		}
		if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %s, %s\n", identity.ID(ca.TrustDomain, identity.Kind(*kind), *id), certPath, keyPath)
		return nil
	}
	return fmt.Errorf("ca %s: unknown (init, issue or sign)", args[1])
}

// priorities returns the lowest and highest priority of f's API keys.
func priorities(f *config.EdgeFile) (lo, hi int) {
	for i, k := range f.APIKeys {
		if i == 0 || k.Priority < lo {
			lo = k.Priority
		}
		if i == 0 || k.Priority > hi {
			hi = k.Priority
		}
	}
	return lo, hi
}

// check validates edge.yaml as a start or a reload would, writing nothing
// (no state directory, epoch or lease-signing key), and prints what it
// configures, with when each certificate it presents ends (one that has
// ended fails the check). The API keys and Node tokens it names are read (to hash),
// so it runs where the Edge does, with the same files and environment;
// hosted-API credentials are read only when leased, by the Edge as here.
func check(path string, out io.Writer) error {
	f, err := config.LoadEdge(path)
	if err != nil {
		return err
	}
	providers := 0
	for _, n := range f.Nodes {
		providers += len(n.Providers)
	}
	fmt.Fprintf(out, "%s is valid.\n", path)
	fmt.Fprintf(out, "  api          %s (%s)\n", f.API.Listen, f.API.TLS.ServerMode())
	if f.API.MetricsToken != nil {
		fmt.Fprintf(out, "  metrics      /metrics behind a bearer token\n")
	} else {
		fmt.Fprintf(out, "  metrics      /metrics open to whoever reaches the api listener (api.metrics_token closes it)\n")
	}
	fmt.Fprintf(out, "  nodes_listen %s (%s)\n", f.NodesListen, f.NodeTLS.ServerMode())
	fmt.Fprintf(out, "  state_dir    %s\n", f.StatePath(""))
	fmt.Fprintf(out, "  api keys     %d\n", len(f.APIKeys))
	if lo, hi := priorities(f); lo < hi {
		cfg, err := f.Preview()
		if err != nil {
			return err
		}
		how := "limits.aging_step"
		if f.Limits.AgingStep == 0 {
			how = "derived from them and the queue timeout"
		}
		fmt.Fprintf(out, "  admission    priorities %d to %d; a waiting request climbs one every %v (%s)\n", lo, hi, cfg.EffectiveAgingStep(), how)
	}
	fmt.Fprintf(out, "  nodes        %d, with %d providers\n", len(f.Nodes), providers)
	fmt.Fprintf(out, "  routes       %d\n", len(f.Routes))
	if len(f.Credentials) > 0 {
		fmt.Fprintf(out, "  credentials  %d, leased to Nodes\n", len(f.Credentials))
	}
	if len(f.Workspaces) > 0 {
		fmt.Fprintf(out, "  workspaces   %d\n", len(f.Workspaces))
	}
	if f.Managed != nil {
		fmt.Fprintf(out, "  managed      trust domain %s\n", f.Managed.TrustDomain)
	}
	if cp := f.ControlPlane; cp != nil {
		fmt.Fprintf(out, "  hub          %s as %s\n", cp.Addr, cp.EdgeID)
	}
	if err := config.ReportCertificates(out, f, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
