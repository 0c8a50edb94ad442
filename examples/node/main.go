// Command node is the reference Node daemon: it reads node.yaml, dials its
// Edge and hosts the providers it lists, reconnecting with backoff until
// SIGINT or SIGTERM. Either shuts it down gracefully: the Edge is told to
// send it nothing new (and sends what it queued elsewhere), and the work
// in flight may finish for up to -shutdown-grace (30 s); a second signal
// cancels it at once. node.yaml is read at start only: SIGHUP, which
// reloads the Edge and the Hub, is answered with a log line saying so,
// and changes nothing.
//
//	go run ./examples/node -config examples/node/node.yaml
//
// `node check -config node.yaml` validates the file as a start would,
// writing nothing (no lease key, no replay file), and prints what it
// configures (exit 1 with the reason when it is not valid); with -probe
// it also asks each provider whether it answers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/config"
	"github.com/iop-dev/iop/node"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check" {
		err := check(os.Args[2:], os.Stdout, os.Stderr)
		if err != nil && !errors.Is(err, flag.ErrHelp) { // -h printed the usage
			fmt.Fprintln(os.Stderr, "node:", err)
			os.Exit(1)
		}
		return
	}
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
	// SIGHUP reloads the Edge and the Hub; here it would end the process
	// at once (Go's default), cutting the work in flight. node.yaml is
	// read at start only, so the signal is answered with how to apply a
	// change instead.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log.Info("node starting", "node", cfg.NodeID, "edge", cfg.EdgeAddr, "providers", len(cfg.Providers))
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(ctx) }()
	var sig os.Signal
wait:
	for {
		select {
		case err = <-runErr:
			break wait
		case <-hup:
			log.Warn("SIGHUP: node.yaml is read at start only, and nothing was reloaded; restart the Node to apply a change (SIGTERM lets its work in flight finish first)")
		case sig = <-sigs:
			break wait
		}
	}
	if sig != nil {
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

// check runs `node check`: it validates node.yaml as a start would
// (every adapter constructed, the token and TLS files read, a lease key
// that is there checked), writing nothing, and prints what it configures,
// with when its client certificate ends (one that has ended fails the
// check). Provider API keys are read only at each call, by the Node
// as here.
func check(args []string, out, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "node.yaml", "path to node.yaml")
	probe := fs.Bool("probe", false, "also ask each provider whether it answers and serves the models listed (reads their API keys)")
	timeout := fs.Duration("probe-timeout", 10*time.Second, "how long each provider has to answer the probe")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("check: unexpected argument %q (the configuration goes with -config)", fs.Arg(0))
	}
	if *timeout <= 0 {
		return fmt.Errorf("check: -probe-timeout %v is not positive", *timeout)
	}
	f, err := config.LoadNode(*path)
	if err != nil {
		return err
	}
	cfg, err := f.Check()
	if err != nil {
		return fmt.Errorf("%s: %w", *path, err)
	}
	link := "TLS"
	switch {
	case f.Plaintext:
		link = "plaintext"
	case f.TLS.CertFile != "":
		link = "mutual TLS"
	}
	fmt.Fprintf(out, "%s is valid.\n", *path)
	fmt.Fprintf(out, "  node       %s\n", f.NodeID)
	fmt.Fprintf(out, "  edge       %s (%s)\n", f.Edge, link)
	for _, p := range f.Providers {
		fmt.Fprintf(out, "  provider   %s (%s): %s\n", p.ID, p.Adapter, strings.Join(p.Models, ", "))
	}
	if len(f.Workspaces) > 0 {
		fmt.Fprintf(out, "  workspaces %d\n", len(f.Workspaces))
	}
	if f.Leases != nil {
		fmt.Fprintf(out, "  leases     %d pinned Edge keys\n", len(f.Leases.EdgeKeys))
	}
	if err := config.ReportCertificates(out, f, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", *path, err)
	}
	if !*probe {
		return nil
	}
	// With leases, a hosted API without a key of its own may take one
	// from the Edge per call: this Node has nothing to probe it with.
	leased := map[string]bool{}
	for i, p := range f.Providers {
		leased[p.ID] = f.Leases != nil && p.APIKey == nil && cfg.Providers[i].Provider.Info().Category == execution.CategoryAPI
	}
	if failed := probeProviders(cfg.Providers, leased, *timeout, out); failed > 0 {
		return fmt.Errorf("%d of %d providers failed the probe", failed, len(cfg.Providers))
	}
	return nil
}

// modelLister is implemented by adapters that can list what their
// upstream serves (openai, ollama).
type modelLister interface {
	ListModels(ctx context.Context) ([]string, error)
}

// probeProviders asks each provider, one after another, whether it
// answers: its upstream's model list (which also proves an API key), or
// its health check (a CLI's executable). It prints a line per provider,
// noting a model node.yaml allows that the list lacks (a note, not a
// failure: a server may list a model under another spelling; Ollama's
// implied ":latest" tag is understood), and returns how many failed. A
// provider's error is the adapter's, which never holds a secret. The
// leased providers are skipped.
func probeProviders(providers []node.Hosted, leased map[string]bool, timeout time.Duration, out io.Writer) (failed int) {
	for _, h := range providers {
		id := h.Provider.Info().ID
		if leased[id] {
			fmt.Fprintf(out, "  probe      %s: skipped (no key of its own: the Edge may lease it one per call)\n", id)
			continue
		}
		missing, err := probeOne(h, timeout)
		if c, ok := h.Provider.(execution.IdleCloser); ok {
			c.CloseIdleConnections()
		}
		switch {
		case err != nil:
			failed++
			msg := err.Error()
			if f, ok := errors.AsType[*execution.Failure](err); ok {
				msg = f.Message // "upstream answered 401", without "run failed"
			}
			fmt.Fprintf(out, "  probe      %s: FAILED: %s\n", id, msg)
		case len(missing) > 0:
			fmt.Fprintf(out, "  probe      %s: ok; the upstream does not list %s\n", id, strings.Join(missing, ", "))
		default:
			fmt.Fprintf(out, "  probe      %s: ok\n", id)
		}
	}
	return failed
}

// probeOne probes one provider; missing are the allowed models its
// upstream does not list.
func probeOne(h node.Hosted, timeout time.Duration) (missing []string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if l, ok := h.Provider.(modelLister); ok {
		served, err := l.ListModels(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range h.AllowedModels {
			// Ollama lists a model under its tag: "llama3" is served as
			// "llama3:latest".
			if !slices.Contains(served, m) && !(!strings.Contains(m, ":") && slices.Contains(served, m+":latest")) {
				missing = append(missing, m)
			}
		}
		return missing, nil
	}
	if hc, ok := h.Provider.(execution.HealthChecker); ok {
		return nil, hc.CheckHealth(ctx)
	}
	return nil, nil
}
