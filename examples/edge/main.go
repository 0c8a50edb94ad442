// Command edge is the reference Edge daemon: it reads edge.yaml, serves the
// OpenAI-compatible API and accepts Node sessions. With a control_plane
// section it also reports to a Hub and takes its commands; the Hub's
// config.refresh re-reads edge.yaml, as SIGHUP does (requests already
// admitted keep their configuration), renewed TLS certificates and client
// CAs included; the listen addresses, state_dir and control_plane are read
// at start only, and a reload that changes them logs that they wait for a
// restart. SIGINT and SIGTERM shut down gracefully, letting requests in
// flight finish for up to -shutdown-grace (30 s); a second signal cuts
// that short.
//
//	go run ./examples/edge -config examples/edge/edge.yaml
//
// Subcommands manage identity and credential leases:
//
//	edge ca init -dir DIR -trust-domain TD     create the Edge CA (ca.crt, ca.key)
//	edge ca issue -dir DIR -kind node|edge -id ID [-dns NAME]... [-ip IP]... [-days N]
//	                                           issue a workload certificate and key
//	edge ca sign -dir DIR -kind node|edge -id ID -csr FILE [-days N]
//	                                           sign a certificate request (the key stays with its owner)
//	edge lease-key -config edge.yaml           print the lease-signing key id and public key for node.yaml
//
// and `edge check -config edge.yaml` validates the file as a start or a
// reload would, writing nothing, and prints what it configures (exit 1
// with the reason when it is not valid).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/internal/config"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "ca" || os.Args[1] == "lease-key" || os.Args[1] == "check") {
		err := subcommand(os.Args[1:], os.Stdout)
		if err != nil && !errors.Is(err, flag.ErrHelp) { // -h printed the usage
			fmt.Fprintln(os.Stderr, "edge:", err)
			os.Exit(1)
		}
		return
	}
	path := flag.String("config", "edge.yaml", "path to edge.yaml")
	grace := flag.Duration("shutdown-grace", 30*time.Second, "how long in-flight requests may finish on shutdown")
	flag.Parse()
	if flag.NArg() > 0 {
		// `edge my.yaml` must not run with the default edge.yaml.
		fmt.Fprintf(os.Stderr, "edge: unexpected argument %q (the configuration goes with -config; -h lists the flags)\n", flag.Arg(0))
		os.Exit(2)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "edge", Level: hclog.Info})
	if err := run(*path, *grace, log); err != nil {
		log.Error("edge stopped", "error", err)
		os.Exit(1)
	}
}

func run(path string, grace time.Duration, log hclog.Logger) error {
	f, err := config.LoadEdge(path)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.StatePath(""), 0o700); err != nil {
		return err
	}
	epoch, err := nodes.NextEpoch(f.StatePath("epoch"))
	if err != nil {
		return err
	}
	cfg, err := f.Config(epoch)
	if err != nil {
		return err
	}
	cfg.Logger = log
	cfg.ConfigSource = func() (edge.Config, error) { return loadConfig(path, epoch, f, log) }
	cfg.Metrics = prometheus.NewRegistry() // served on /metrics
	cfg.Metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := edge.New(cfg)
	if err != nil {
		return err
	}
	apiLn, err := net.Listen("tcp", f.API.Listen)
	if err != nil {
		return err
	}
	nodeLn, err := net.Listen("tcp", f.NodesListen)
	if err != nil {
		apiLn.Close()
		return err
	}
	errc := make(chan error, 2)
	go func() {
		if cfg.APITLS != nil {
			errc <- srv.ServeTLS(apiLn, nil) // cfg.APITLS, renewed certificates on reload
		} else {
			errc <- srv.Serve(apiLn)
		}
	}()
	go func() { errc <- srv.ServeNodes(nodeLn) }()
	link, err := f.Connector()
	if err != nil {
		srv.Close()
		return err
	}
	if link != nil {
		link.Logger = log.Named("hub")
		// The link ends when the server closes; it redials by itself.
		go func() {
			if err := srv.ConnectControlPlane(context.Background(), *link); !errors.Is(err, edge.ErrServerClosed) {
				log.Error("control plane link ended", "error", err)
			}
		}()
		log.Info("reporting to the control plane", "hub", link.HubAddr, "edge_id", link.EdgeID)
	}
	scheme := "http"
	if cfg.APITLS != nil {
		scheme = "https"
	}
	log.Info("edge running", "api", fmt.Sprintf("%s://%s/v1", scheme, apiLn.Addr()), "nodes", nodeLn.Addr().String(), "epoch", epoch)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	for {
		select {
		case err := <-errc:
			srv.Close()
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if err := reload(srv, path, epoch, f, log); err != nil {
					log.Error("reload refused; the running configuration stays", "error", err)
				}
				continue
			}
			log.Info("shutting down", "signal", sig.String(), "grace", grace)
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			// A second SIGINT or SIGTERM cuts the grace short.
			go func() {
				for {
					select {
					case s := <-sigs:
						if s != syscall.SIGHUP {
							log.Warn("second signal: cancelling the requests in flight", "signal", s.String())
							cancel()
							return
						}
					case <-ctx.Done():
						return
					}
				}
			}()
			err := srv.Shutdown(ctx)
			cancel()
			// The grace ending, or cut short, is a clean stop: the
			// requests it ended got their error terminals.
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
	}
}

func reload(srv *edge.Server, path string, epoch uint32, started *config.EdgeFile, log hclog.Logger) error {
	cfg, err := loadConfig(path, epoch, started, log)
	if err != nil {
		return err
	}
	return srv.Reload(cfg)
}

// loadConfig re-reads edge.yaml for a reload (SIGHUP or the Hub's
// config.refresh). What the Edge reads only at start (started's listen
// addresses, state directory and control_plane link) stays as it was; a
// change to it is logged as waiting for a restart, never silently kept.
func loadConfig(path string, epoch uint32, started *config.EdgeFile, log hclog.Logger) (edge.Config, error) {
	f, err := config.LoadEdge(path)
	if err != nil {
		return edge.Config{}, err
	}
	if changed := started.StartOnly(f); len(changed) > 0 {
		log.Warn("edge.yaml changes that take effect only at restart; the running values stay", "settings", strings.Join(changed, ", "))
	}
	return f.Config(epoch)
}
