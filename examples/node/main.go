// Command node is the reference Node daemon: it reads node.yaml, dials its
// Edge and hosts the providers it lists, reconnecting with backoff until
// SIGINT or SIGTERM. Either shuts it down gracefully: the Edge is told to
// send it nothing new (and sends what it queued elsewhere), and the work
// in flight may finish for up to -shutdown-grace (30 s); a second signal
// cancels it at once.
//
//	go run ./examples/node -config examples/node/node.yaml
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/internal/config"
	"github.com/iop-dev/iop/node"
)

func main() {
	path := flag.String("config", "node.yaml", "path to node.yaml")
	grace := flag.Duration("shutdown-grace", 30*time.Second, "how long the work in flight may finish on shutdown")
	flag.Parse()
	if flag.NArg() > 0 {
		// `node my.yaml` must not run with the default node.yaml.
		fmt.Fprintf(os.Stderr, "node: unexpected argument %q (the configuration goes with -config; -h lists the flags)\n", flag.Arg(0))
		os.Exit(2)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "node", Level: hclog.Info})
	if err := run(*path, *grace, log); err != nil {
		log.Error("node stopped", "error", err)
		os.Exit(1)
	}
}

func run(path string, grace time.Duration, log hclog.Logger) error {
	f, err := config.LoadNode(path)
	if err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	cfg.Logger = log
	rt, err := node.New(cfg)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log.Info("node starting", "node", cfg.NodeID, "edge", cfg.EdgeAddr, "providers", len(cfg.Providers))
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(ctx) }()
	select {
	case err = <-runErr:
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String(), "grace", grace)
		gctx, gcancel := context.WithTimeout(context.Background(), grace)
		// A second signal cuts the grace short.
		go func() {
			select {
			case <-sigs:
				gcancel()
			case <-gctx.Done():
			}
		}()
		if serr := rt.Shutdown(gctx); serr != nil {
			log.Warn("shutdown grace ended with work in flight; it was cancelled", "error", serr)
		}
		gcancel()
		cancel()
		err = <-runErr
	}
	if err != nil && !errors.Is(err, node.ErrShutdown) && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
