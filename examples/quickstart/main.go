// Command quickstart runs a whole IOP in one process on loopback: an Edge,
// a Node, and a built-in model (a fake upstream that echoes), plus the
// models of an Ollama server if one answers on 127.0.0.1:11434, and a
// Control Plane Hub the Edge reports to. It prints the API's URL, an API
// key, a ready-to-paste curl command and a sign-in link to the status page.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/ollama"
	"github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/node"
)

type options struct {
	addr       string
	statusAddr string
	ollamaURL  string
}

func main() {
	o, err := parseArgs(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2) // parseArgs said why
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// parseArgs reads the command line (without the program name). What is
// wrong with it is written to stderr, with the usage for a flag error; a
// word that is not a flag is refused, since the quickstart takes no
// configuration file. flag.ErrHelp means -h was given.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "API listen address (a free port is used if it is taken)")
	fs.StringVar(&o.statusAddr, "status-addr", "127.0.0.1:8081", "status page and operator API listen address (a free port is used if it is taken)")
	fs.StringVar(&o.ollamaURL, "ollama", "http://127.0.0.1:11434", "an Ollama server to offer too, if it answers (empty: never)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q (-h lists the flags)", fs.Arg(0))
		fmt.Fprintln(stderr, "quickstart:", err)
		return options{}, err
	}
	return o, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ollamaModels returns the models of an Ollama server that answers.
func ollamaModels(base string) []string {
	if base == "" {
		return nil
	}
	c := &http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get(base + "/api/tags")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tags) != nil {
		return nil
	}
	var out []string
	for _, m := range tags.Models {
		out = append(out, m.Name)
	}
	return out
}

func run(ctx context.Context, o options, out io.Writer) error {
	log := hclog.New(&hclog.LoggerOptions{Name: "quickstart", Level: hclog.Warn, Output: os.Stderr})

	// The built-in model: a fake upstream speaking the OpenAI API.
	up := upstreamtest.New(upstreamtest.Config{Models: []string{"iop-echo"}})
	upURL := up.Start()
	defer up.Close()

	apiKey, err := edge.GenerateKey()
	if err != nil {
		return err
	}
	nodeToken := randomHex(24)
	echo, err := openai.New(openai.Config{ID: "echo", BaseURL: upURL, Models: []string{"iop-echo"}})
	if err != nil {
		return err
	}
	hosted := []node.Hosted{{Provider: echo}}
	specs := []nodes.ProviderSpec{{ID: "echo", Adapter: openai.Kind, Category: execution.CategoryLocal, Models: []string{"iop-echo"}, Capacity: 16}}
	routes := []edge.Route{{Model: "iop-echo", Targets: []edge.Target{{ProviderID: "echo", Model: "iop-echo"}}}}
	models := []string{"iop-echo"}
	if om := ollamaModels(o.ollamaURL); len(om) > 0 {
		ol, err := ollama.New(ollama.Config{ID: "ollama", BaseURL: o.ollamaURL, Models: om})
		if err != nil {
			return err
		}
		hosted = append(hosted, node.Hosted{Provider: ol})
		specs = append(specs, nodes.ProviderSpec{ID: "ollama", Adapter: ollama.Kind, Category: execution.CategoryLocal, Models: om, Capacity: 2})
		for _, m := range om {
			if m == "iop-echo" {
				continue
			}
			routes = append(routes, edge.Route{Model: m, Targets: []edge.Target{{ProviderID: "ollama", Model: m}}})
			models = append(models, m)
		}
	}

	epoch, err := nodes.NextEpoch(filepath.Join(os.TempDir(), "iop-quickstart-epoch"))
	if err != nil {
		return err
	}
	srv, err := edge.New(edge.Config{
		Epoch:   epoch,
		Nodes:   []nodes.Record{{ID: "quickstart-node", TokenHash: nodes.HashToken(nodeToken), Providers: specs}},
		APIKeys: []edge.APIKey{{Name: "quickstart", Hash: edge.HashKey(apiKey), Models: []string{"*"}}},
		Routes:  routes,
		Logger:  log.Named("edge"),
	})
	if err != nil {
		return err
	}
	// The Control Plane: a Hub that enrolls this one Edge and one operator.
	edgeToken, operatorToken := randomHex(24), randomHex(24)
	hub, err := controlplane.New(controlplane.Config{
		Edges:     []controlplane.EdgeRecord{{ID: "quickstart-edge", TokenHash: controlplane.HashToken(edgeToken)}},
		Operators: []controlplane.Operator{{Name: "quickstart", TokenHash: controlplane.HashToken(operatorToken)}},
		Logger:    log.Named("hub"),
	})
	if err != nil {
		return err
	}
	var lns []net.Listener
	listen := func(addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil && addr != "127.0.0.1:0" {
			ln, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
		return ln, nil
	}
	apiLn, err := listen(o.addr)
	if err != nil {
		return err
	}
	nodeLn, err := listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	hubLn, err := listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	statusLn, err := listen(o.statusAddr)
	if err != nil {
		return err
	}
	statusSrv := &http.Server{Handler: hub.Handler(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(apiLn) })
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	wg.Go(func() { hub.ServeEdges(hubLn) })
	wg.Go(func() { statusSrv.Serve(statusLn) })
	wg.Go(func() {
		srv.ConnectControlPlane(context.Background(), controlplane.ConnectorConfig{
			HubAddr: hubLn.Addr().String(), EdgeID: "quickstart-edge", Token: edgeToken, Logger: log.Named("link")})
	})

	rt, err := node.New(node.Config{EdgeAddr: nodeLn.Addr().String(), NodeID: "quickstart-node", Token: nodeToken, Providers: hosted, Logger: log.Named("node")})
	if err != nil {
		srv.Close()
		statusSrv.Close()
		hub.Close()
		wg.Wait()
		return err
	}
	nodeCtx, stopNode := context.WithCancel(context.Background())
	wg.Go(func() { rt.Run(nodeCtx) })
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		srv.Shutdown(sctx) // requests in flight finish first; ends the Hub link
		cancel()
		stopNode()
		statusSrv.Close()
		hub.Close()
		wg.Wait()
	}()

	ready := time.NewTimer(15 * time.Second)
	defer ready.Stop()
	for {
		if _, ok := srv.Registry().Current("quickstart-node"); ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ready.C:
			return errors.New("the built-in Node did not become ready")
		case <-time.After(5 * time.Millisecond):
		}
	}

	url := "http://" + apiLn.Addr().String()
	fmt.Fprintf(out, `IOP quickstart is running: an Edge, a Node and a built-in model on this machine.

  OpenAI-compatible API  %s/v1
  API key                %s
  Models                 %v

Try it:

  curl %s/v1/chat/completions \
    -H "Authorization: Bearer %s" \
    -H "Content-Type: application/json" \
    -d '{"model":"iop-echo","messages":[{"role":"user","content":"Hello, IOP!"}]}'

Any OpenAI client works too: set its base URL to %s/v1 and its API key to the one above.
Anthropic clients (and Claude Code) take the base URL %s, without /v1, and the same key.

  Status page            %s/#token=%s
  Operator API           curl -H "Authorization: Bearer %s" '%s/api/edges?nodes=1'

Press Ctrl+C to stop.
`, url, apiKey, models, url, apiKey, url, url, "http://"+statusLn.Addr().String(), operatorToken, operatorToken, "http://"+statusLn.Addr().String())
	<-ctx.Done()
	fmt.Fprintln(out, "stopping: requests in flight finish first")
	return nil
}
