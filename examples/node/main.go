// Command node is the reference Node daemon: it reads node.yaml, dials its
// Edge and hosts the providers it lists, reconnecting with backoff until
// SIGINT or SIGTERM.
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

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/internal/config"
	"github.com/iop-dev/iop/node"
)

func main() {
	path := flag.String("config", "node.yaml", "path to node.yaml")
	flag.Parse()
	if flag.NArg() > 0 {
		// `node my.yaml` must not run with the default node.yaml.
		fmt.Fprintf(os.Stderr, "node: unexpected argument %q (the configuration goes with -config; -h lists the flags)\n", flag.Arg(0))
		os.Exit(2)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "node", Level: hclog.Info})
	if err := run(*path, log); err != nil {
		log.Error("node stopped", "error", err)
		os.Exit(1)
	}
}

func run(path string, log hclog.Logger) error {
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("node starting", "node", cfg.NodeID, "edge", cfg.EdgeAddr, "providers", len(cfg.Providers))
	if err := rt.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
