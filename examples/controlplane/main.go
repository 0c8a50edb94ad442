// Command controlplane is the reference Control Plane: a Hub daemon that
// Edges dial and operators watch, and a small client for its operator API.
//
//	go run ./examples/controlplane serve -config examples/controlplane/hub.yaml
//
// `controlplane check -config hub.yaml` validates the file as serve would
// and prints what it configures (exit 1 with the reason when it is not
// valid).
//
// SIGHUP re-reads hub.yaml's Edges and operators (a removed Edge is
// disconnected, a removed operator signed out); SIGINT and SIGTERM stop.
//
// The client commands read the Hub's URL from IOP_HUB_URL (default
// http://127.0.0.1:9451) and the operator's token from IOP_OPERATOR_TOKEN:
//
//	controlplane edges                       Edges with their Node counts
//	controlplane edge EDGE [-refresh]        one Edge's Nodes and providers
//	controlplane command EDGE OPERATION [-node ID] [-provider ID] [-arg k=v]...
//	controlplane events                      follow Node and Edge events
//
// A command prints each phase as the Edge reports it and exits non-zero
// when it is rejected or fails. The status page is at the Hub's URL.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/internal/config"
)

var usage = `usage:
  controlplane serve -config hub.yaml
  controlplane check -config hub.yaml
  controlplane edges
  controlplane edge EDGE [-refresh]
  controlplane command EDGE OPERATION [-node ID] [-provider ID] [-arg key=value]...
  controlplane events
operations: ` + strings.Join(controlplane.Operations, ", ") + `
environment: IOP_HUB_URL (default http://127.0.0.1:9451), IOP_OPERATOR_TOKEN
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError string

func (e usageError) Error() string { return string(e) }

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	if len(args) == 0 {
		return usageError("a command is required")
	}
	switch args[0] {
	case "serve", "check":
		path, err := configPath(args[0], args[1:])
		if err != nil {
			return err
		}
		if args[0] == "check" {
			return check(path, out)
		}
		return serve(ctx, path, hclog.New(&hclog.LoggerOptions{Name: "hub", Level: hclog.Info}), nil)
	}
	base := getenv("IOP_HUB_URL")
	if base == "" {
		base = "http://127.0.0.1:9451"
	}
	token := getenv("IOP_OPERATOR_TOKEN")
	if token == "" {
		return errors.New("IOP_OPERATOR_TOKEN is not set")
	}
	c := &client{base: strings.TrimRight(base, "/"), token: token, out: out}
	switch args[0] {
	case "edges":
		if len(args) > 1 {
			return usageError("edges takes no arguments (for one Edge: edge EDGE)")
		}
		return c.edges(ctx)
	case "edge":
		fs := flag.NewFlagSet("edge", flag.ContinueOnError)
		refresh := fs.Bool("refresh", false, "ask the Edge for a fresh status first")
		id, rest := firstArg(args[1:])
		if err := fs.Parse(rest); err != nil || id == "" || fs.NArg() > 0 {
			return usageError("edge EDGE [-refresh]")
		}
		return c.edge(ctx, id, *refresh)
	case "command":
		fs := flag.NewFlagSet("command", flag.ContinueOnError)
		node := fs.String("node", "", "target node id")
		provider := fs.String("provider", "", "target provider id")
		argv := map[string]string{}
		fs.Func("arg", "an operation argument, key=value (repeatable)", func(s string) error {
			k, v, ok := strings.Cut(s, "=")
			if !ok || k == "" {
				return errors.New("want key=value")
			}
			argv[k] = v
			return nil
		})
		edgeID, rest := firstArg(args[1:])
		op, rest := firstArg(rest)
		if err := fs.Parse(rest); err != nil || edgeID == "" || op == "" || fs.NArg() > 0 {
			return usageError("command EDGE OPERATION [-node ID] [-provider ID] [-arg key=value]...")
		}
		return c.command(ctx, edgeID, op, *node, *provider, argv)
	case "events":
		if len(args) > 1 {
			return usageError("events takes no arguments")
		}
		return c.events(ctx)
	}
	return usageError(fmt.Sprintf("unknown command %q", args[0]))
}

// firstArg splits off a leading positional argument.
func firstArg(args []string) (string, []string) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return "", args
	}
	return args[0], args[1:]
}

// configPath reads the one flag serve and check take, -config; a stray
// word is refused (`serve my.yaml` must not run with the default
// hub.yaml).
func configPath(cmd string, args []string) (string, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	path := fs.String("config", "hub.yaml", "path to hub.yaml")
	if err := fs.Parse(args); err != nil {
		return "", usageError(err.Error())
	}
	if fs.NArg() > 0 {
		return "", usageError(fmt.Sprintf("%s: unexpected argument %q (the configuration goes with -config)", cmd, fs.Arg(0)))
	}
	return *path, nil
}

// check runs `controlplane check`: it validates hub.yaml as serve would
// (the operators' and Edges' secrets and the TLS files read), and prints
// what it configures, with when each certificate it presents ends (one
// that has ended fails the check).
func check(path string, out io.Writer) error {
	f, err := config.LoadHub(path) // builds and validates the Hub's configuration
	if err != nil {
		return err
	}
	if _, err := f.HTTPTLS(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	scheme := "http"
	if f.HTTP.TLS != nil {
		scheme = "https"
	}
	fmt.Fprintf(out, "%s is valid.\n", path)
	fmt.Fprintf(out, "  edges_listen %s (%s)\n", f.EdgesListen, f.EdgeTLS.ServerMode())
	fmt.Fprintf(out, "  http         %s://%s\n", scheme, f.HTTP.Listen)
	fmt.Fprintf(out, "  edges        %d enrolled\n", len(f.Edges))
	fmt.Fprintf(out, "  operators    %d\n", len(f.Operators))
	if err := config.ReportCertificates(out, f, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// serve runs the Hub from hub.yaml until ctx ends. ready, when set,
// receives the two listeners' addresses (for tests).
func serve(ctx context.Context, path string, log hclog.Logger, ready func(edges, http string)) error {
	f, err := config.LoadHub(path)
	if err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	cfg.Logger = log
	httpTLS, err := f.HTTPTLS()
	if err != nil {
		return err
	}
	hub, err := controlplane.New(cfg)
	if err != nil {
		return err
	}
	defer hub.Close()
	edgeLn, err := net.Listen("tcp", f.EdgesListen)
	if err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", f.HTTP.Listen)
	if err != nil {
		edgeLn.Close()
		return err
	}
	scheme := "http"
	var currentTLS atomic.Pointer[tls.Config] // http.tls, renewed by a reload
	if httpTLS != nil {
		currentTLS.Store(httpTLS)
		// Each handshake takes the configuration of the moment.
		httpLn, scheme = tls.NewListener(httpLn, &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return currentTLS.Load(), nil
		}}), "https"
	}
	hs := &http.Server{Handler: hub.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	errc := make(chan error, 2)
	go func() { errc <- hub.ServeEdges(edgeLn) }()
	go func() { errc <- hs.Serve(httpLn) }()
	log.Info("hub running", "edges", edgeLn.Addr().String(), "operator", scheme+"://"+httpLn.Addr().String(), "configured_edges", len(cfg.Edges))
	if ready != nil {
		ready(edgeLn.Addr().String(), scheme+"://"+httpLn.Addr().String())
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var runErr error
wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down")
			break wait
		case runErr = <-errc:
			break wait
		case <-hup:
			if err := reload(hub, path, f, &currentTLS, log); err != nil {
				log.Error("reload refused; the running configuration stays", "error", err)
			}
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx) // an open event stream holds its connection until the deadline
	hub.Close()
	if runErr != nil && !errors.Is(runErr, controlplane.ErrClosed) && !errors.Is(runErr, http.ErrServerClosed) {
		return runErr
	}
	return nil
}

// reload re-reads hub.yaml: Edges, operators, and the certificates of
// edge_tls and http.tls take effect (for connections accepted later); what
// the Hub reads only at start (started's listen addresses and limits) is
// logged as waiting for a restart; a change of who may connect, or of
// whether http.tls is on, refuses the whole reload.
func reload(hub *controlplane.Hub, path string, started *config.HubFile, httpTLS *atomic.Pointer[tls.Config], log hclog.Logger) error {
	nf, err := config.LoadHub(path)
	if err != nil {
		return err
	}
	nc, err := nf.Config()
	if err != nil {
		return err
	}
	nextTLS, err := nf.HTTPTLS()
	if err != nil {
		return err
	}
	if (nextTLS == nil) != (httpTLS.Load() == nil) {
		return errors.New("http.tls cannot be turned on or off on reload; restart the Hub")
	}
	if err := hub.Reload(nc); err != nil {
		return err
	}
	if nextTLS != nil {
		httpTLS.Store(nextTLS)
	}
	if changed := started.StartOnly(nf); len(changed) > 0 {
		log.Warn("hub.yaml changes that take effect only at restart; the running values stay", "settings", strings.Join(changed, ", "))
	}
	return nil
}

// client is an operator API client.
type client struct {
	base, token string
	out         io.Writer
}

// apiError is the Hub's answer to a refused request.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("hub answered %d %s: %s", e.Status, e.Code, e.Message)
}

func (c *client) do(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var m struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
			Rejection string `json:"rejection"`
			Message   string `json:"message"`
		}
		json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m)
		e := &apiError{Status: resp.StatusCode, Code: m.Error.Code, Message: m.Error.Message}
		if m.Rejection != "" {
			e.Code, e.Message = "rejected: "+m.Rejection, m.Message
		}
		return nil, e
	}
	return resp, nil
}

func (c *client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, "GET", path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

type edgeJSON struct {
	ID             string                  `json:"id"`
	Connected      bool                    `json:"connected"`
	Version        string                  `json:"version"`
	Routes         int                     `json:"routes"`
	Queued         int                     `json:"queued"`
	MaxQueued      int                     `json:"max_queued"`
	QueueFull      uint64                  `json:"queue_full"`
	QueuedBytes    uint64                  `json:"queued_bytes"`
	MaxQueuedBytes uint64                  `json:"max_queued_bytes"`
	ConfigRevision uint64                  `json:"config_revision"`
	NodeCount      int                     `json:"node_count"`
	NodesOnline    int                     `json:"nodes_online"`
	InFlight       int                     `json:"in_flight"`
	Capacity       int                     `json:"capacity"`
	Nodes          []controlplane.NodeView `json:"nodes"`
}

// queued is how many requests wait in the Edge's queue, of the most that
// may, and what their bodies hold of the most they may, when the Edge
// reports them: "3/1024 (1.5 MiB of 256 MiB)".
func (e edgeJSON) queued() string {
	s := strconv.Itoa(e.Queued)
	if e.MaxQueued > 0 {
		s += "/" + strconv.Itoa(e.MaxQueued)
	}
	if e.MaxQueuedBytes > 0 {
		s += fmt.Sprintf(" (%s of %s)", size(e.QueuedBytes), size(e.MaxQueuedBytes))
	}
	return s
}

// size writes a byte count in binary units: "0 B", "1.5 KiB", "256 MiB".
func size(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func (c *client) edges(ctx context.Context) error {
	var list struct {
		Edges []edgeJSON `json:"edges"`
	}
	if err := c.getJSON(ctx, "/api/edges", &list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EDGE\tCONNECTED\tNODES ONLINE\tIN FLIGHT\tQUEUED\tQUEUE FULL\tROUTES\tCONFIG REV")
	for _, e := range list.Edges {
		fmt.Fprintf(tw, "%s\t%v\t%d/%d\t%d/%d\t%s\t%d\t%d\t%d\n", e.ID, e.Connected, e.NodesOnline, e.NodeCount, e.InFlight, e.Capacity, e.queued(), e.QueueFull, e.Routes, e.ConfigRevision)
	}
	return tw.Flush()
}

// cooling describes what of provider p cools at now (answered "not now"
// and gets no slot until then): " (cooling until 15:04:05)" for the whole
// provider, " (gpt-4o cooling until 15:04:05)" for a model; "" when
// nothing does.
func cooling(p controlplane.ProviderView, now time.Time) string {
	var parts []string
	if p.CoolingUntil != nil && p.CoolingUntil.After(now) {
		parts = append(parts, "cooling until "+p.CoolingUntil.Local().Format(time.TimeOnly))
	}
	for _, m := range slices.Sorted(maps.Keys(p.CoolingModels)) {
		if until := p.CoolingModels[m]; until.After(now) {
			parts = append(parts, m+" cooling until "+until.Local().Format(time.TimeOnly))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func (c *client) edge(ctx context.Context, id string, refresh bool) error {
	path := "/api/edges/" + url.PathEscape(id)
	if refresh {
		path += "?refresh=1"
	}
	var e edgeJSON
	if err := c.getJSON(ctx, path, &e); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "edge %s: connected %v, %d/%d nodes online, queued %s, %d turned away by a full queue, routes %d, config revision %d\n",
		e.ID, e.Connected, e.NodesOnline, e.NodeCount, e.queued(), e.QueueFull, e.Routes, e.ConfigRevision)
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tPROVIDER\tADAPTER\tSTATUS\tHEALTH\tIN FLIGHT\tLONG CTX\tQUEUED")
	for _, n := range e.Nodes {
		state := "offline"
		switch {
		case n.Connected && n.Draining:
			state = "draining"
		case n.Connected:
			state = "online"
		}
		for i, p := range n.Providers {
			name, st := n.ID, state
			if i > 0 {
				name, st = "", ""
			}
			status := p.Status + cooling(p, time.Now())
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t%d\n", name, st, p.ID, p.Adapter, status, p.Health,
				p.InFlight, p.Capacity, p.LongContextInFlight, p.LongContextCapacity, p.Queued)
		}
	}
	return tw.Flush()
}

// errCommandFailed is a command the Edge ran and reported failed.
var errCommandFailed = errors.New("the command failed")

func (c *client) command(ctx context.Context, edgeID, op, node, provider string, args map[string]string) error {
	body := map[string]any{"operation": op, "node_id": node, "provider_id": provider}
	if len(args) > 0 {
		body["args"] = args
	}
	resp, err := c.do(ctx, "POST", "/api/edges/"+url.PathEscape(edgeID)+"/commands", body, "text/event-stream")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A rejection is answered as JSON with a 4xx status, so this is
		// a proxy that buffered the stream: show what came.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		fmt.Fprintln(c.out, strings.TrimSpace(string(b)))
		return nil
	}
	outcome := ""
	err = readSSE(resp.Body, func(typ string, data []byte) bool {
		switch typ {
		case "accepted":
			var m struct {
				ID string `json:"command_id"`
			}
			json.Unmarshal(data, &m)
			fmt.Fprintf(c.out, "accepted %s\n", m.ID)
		case "phase":
			var m struct {
				Seq      int             `json:"seq"`
				Phase    string          `json:"phase"`
				Message  string          `json:"message"`
				InFlight *int            `json:"in_flight"`
				Result   json.RawMessage `json:"result"`
			}
			json.Unmarshal(data, &m)
			line := fmt.Sprintf("%3d %-9s %s", m.Seq, m.Phase, m.Message)
			if m.InFlight != nil {
				line += fmt.Sprintf(" (in flight %d)", *m.InFlight)
			}
			fmt.Fprintln(c.out, strings.TrimRight(line, " "))
			if len(m.Result) > 0 {
				fmt.Fprintf(c.out, "    result: %s\n", m.Result)
			}
			if m.Phase == "succeeded" || m.Phase == "failed" {
				outcome = m.Phase
				return false
			}
		case "error":
			outcome = "broken"
			return false
		}
		return true
	})
	switch {
	case err != nil:
		return err
	case outcome == "succeeded":
		return nil
	case outcome == "failed":
		return errCommandFailed
	}
	return errors.New("the edge's answer broke off before the command ended")
}

func (c *client) events(ctx context.Context) error {
	resp, err := c.do(ctx, "GET", "/api/events/stream", nil, "text/event-stream")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = readSSE(resp.Body, func(typ string, data []byte) bool {
		var ev controlplane.Event
		if typ == "resync" || json.Unmarshal(data, &ev) != nil {
			fmt.Fprintf(c.out, "%s %s\n", typ, data)
			return true
		}
		line := fmt.Sprintf("%s %-18s %s", ev.Time.Format(time.TimeOnly), ev.Kind, ev.EdgeID)
		if ev.NodeID != "" {
			line += "/" + ev.NodeID
		}
		switch {
		case ev.Provider != nil && ev.Kind == controlplane.EventProviderCooling:
			line += " " + ev.Provider.ID + " " + coolingText(*ev.Provider)
		case ev.Provider != nil:
			line += fmt.Sprintf(" %s %s/%s", ev.Provider.ID, ev.Provider.Status, ev.Provider.Health)
		}
		if ev.Reason != "" {
			line += " (" + ev.Reason + ")"
		}
		fmt.Fprintln(c.out, line)
		return true
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// coolingText says what of p a provider_cooling event found cooling and
// until when (models in name order); nothing cooling means its cooldowns
// ended.
func coolingText(p controlplane.ProviderView) string {
	var parts []string
	if p.CoolingUntil != nil {
		parts = append(parts, "until "+p.CoolingUntil.Local().Format(time.TimeOnly))
	}
	for _, m := range slices.Sorted(maps.Keys(p.CoolingModels)) {
		parts = append(parts, m+" until "+p.CoolingModels[m].Local().Format(time.TimeOnly))
	}
	if len(parts) == 0 {
		return "cooling ended"
	}
	return "cooling " + strings.Join(parts, ", ")
}

// readSSE calls f for each event of a text/event-stream until f returns
// false or the stream ends.
func readSSE(r io.Reader, f func(typ string, data []byte) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var typ string
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if typ != "" || len(data) > 0 {
				if !f(typ, data) {
					return nil
				}
			}
			typ, data = "", nil
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(line[len("data:"):], " ")...)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}
