package node

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/backoff"
	"github.com/iop-dev/iop/wire/iopv1"
)

// Runtime is a Node: it dials its Edge, registers, applies the Edge's config
// intersected with its allow-list, reports ready, and executes what its
// current connection sends. When the connection ends it cancels every run
// that connection owns and reconnects with backoff.
type Runtime struct {
	cfg   Config
	log   hclog.Logger
	allow map[string]Hosted

	// stop ends with Shutdown: a registration under way and the backoff
	// wait end with it, a serving connection drains first.
	stop    context.Context
	stopNow context.CancelFunc

	mu      sync.Mutex
	status  Status
	cur     *session      // the serving connection, nil between them
	runDone chan struct{} // closed when Run returns; nil before Run
}

// State is where a Runtime is in its connection cycle.
type State string

// Runtime states.
const (
	StateIdle        State = "idle"
	StateConnecting  State = "connecting"
	StateRegistering State = "registering"
	StateReady       State = "ready"
	StateDraining    State = "draining" // Shutdown: no new work, the work in flight finishing
	StateBackoff     State = "backoff"
	StateStopped     State = "stopped"
)

// Status is a snapshot of a Runtime.
type Status struct {
	State State
	// Generation and Revision of the current connection (0 when none).
	Generation uint64
	Revision   uint64
	// Hosted lists the providers hosted under the current config; Refused
	// lists the payload entries refused by the allow-list.
	Hosted  []string
	Refused []string
	// Connects counts connections that reached ready.
	Connects int
	// LastError is why the last attempt or connection ended.
	LastError error
}

// RegistrationError is a refusal from the Edge.
type RegistrationError struct {
	Rejection iopv1.RegisterRejection
	Message   string
}

func (e *RegistrationError) Error() string {
	return fmt.Sprintf("node: registration rejected: %s (%s)", e.Rejection, e.Message)
}

// New validates cfg and returns a Runtime. It does not connect; Run does.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rt := &Runtime{cfg: cfg, log: cfg.Logger, allow: make(map[string]Hosted)}
	rt.stop, rt.stopNow = context.WithCancel(context.Background())
	if rt.log == nil {
		rt.log = hclog.NewNullLogger()
	}
	for _, h := range cfg.Providers {
		rt.allow[h.Provider.Info().ID] = h
	}
	rt.status.State = StateIdle
	return rt, nil
}

// Status returns the runtime's current status.
func (rt *Runtime) Status() Status {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.status
}

func (rt *Runtime) setStatus(f func(*Status)) {
	rt.mu.Lock()
	f(&rt.status)
	rt.mu.Unlock()
}

// drainingRetry is how soon a Node retries a registration the Edge
// refused because the node id's previous connection is draining
// (REGISTER_REJECTION_DRAINING), within the reconnect policy's maximum.
const drainingRetry = time.Second

// ErrShutdown is returned by Run after Shutdown.
var ErrShutdown = errors.New("node: runtime shut down")

// Run connects and stays connected until ctx ends, reconnecting with
// backoff; the backoff resets after each ready handshake, and a
// registration deferred while this node id's previous connection drains
// is retried within about a second, without advancing it. When ctx ends,
// the work in flight is cancelled (Shutdown lets it finish instead). It
// returns ctx's error, or ErrShutdown after Shutdown, once every run and
// tunnel it started has ended and the idle upstream connections of its
// providers (those implementing execution.IdleCloser) are closed. Run
// must not be called twice at once.
func (rt *Runtime) Run(ctx context.Context) error {
	done := make(chan struct{})
	rt.mu.Lock()
	rt.runDone = done
	rt.mu.Unlock()
	defer close(done)
	bo := backoff.New(backoff.Config(rt.cfg.Backoff))
	defer rt.setStatus(func(s *Status) { s.State = StateStopped; s.Generation = 0 })
	defer rt.closeIdle()
	for {
		if rt.stop.Err() != nil {
			return ErrShutdown
		}
		ready, err := rt.connectOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rt.stop.Err() != nil {
			return ErrShutdown
		}
		if ready {
			bo.Reset()
		}
		rt.setStatus(func(s *Status) { s.State = StateBackoff; s.LastError = err; s.Generation = 0 })
		var re *RegistrationError
		errors.As(err, &re)
		var delay time.Duration
		switch {
		case re != nil && re.Rejection == iopv1.RegisterRejection_REGISTER_REJECTION_DRAINING:
			// This node id's previous connection (most likely the
			// process this one replaces) is finishing its work: it
			// ends when that does, and the node's capacity is back only
			// once this one registers, so retry soon, not on a
			// backoff that grew while the old one drained.
			delay = bo.Soon(drainingRetry)
			rt.log.Info("registration deferred: this node's previous connection is draining; retrying soon", "delay", delay)
		case re != nil:
			delay = bo.Next()
			rt.log.Warn("registration rejected; retrying", "rejection", re.Rejection.String(), "delay", delay)
		default:
			delay = bo.Next()
			rt.log.Info("connection ended; reconnecting", "error", err, "delay", delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-rt.stop.Done():
			t.Stop()
			return ErrShutdown
		}
	}
}

// Shutdown stops the Runtime gracefully. Its connection tells the Edge
// (GOAWAY) that it takes no new work, so the Edge admits nothing more to
// this Node and sends what it queued to other candidates; the runs and
// tunnels in flight finish, until ctx ends, when what is left is
// cancelled. Then the connection closes. A connection still registering
// or a backoff wait ends at once. Shutdown returns when Run has returned
// (ErrShutdown), or ctx's error when ctx ended first; a Runtime shut down
// does not connect again.
func (rt *Runtime) Shutdown(ctx context.Context) error {
	rt.mu.Lock()
	rt.stopNow() // under mu: serving sees it or Shutdown sees the connection
	s, done := rt.cur, rt.runDone
	rt.mu.Unlock()
	var err error
	if s != nil {
		err = s.drain(ctx)
	}
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			// Run ends soon after: its connection is closed.
			err = ctx.Err()
		}
	}
	return err
}

// serving makes s the connection Shutdown drains; false when Shutdown
// has already been called (s must then close instead of serving).
func (rt *Runtime) serving(s *session) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if s != nil && rt.stop.Err() != nil {
		return false
	}
	rt.cur = s
	return true
}

// closeIdle closes the providers' idle upstream connections.
func (rt *Runtime) closeIdle() {
	for _, h := range rt.cfg.Providers {
		if c, ok := h.Provider.(execution.IdleCloser); ok {
			c.CloseIdleConnections()
		}
	}
}

func (rt *Runtime) version() string {
	if rt.cfg.Version == "" {
		return "dev"
	}
	return rt.cfg.Version
}

func (rt *Runtime) registerTimeout() time.Duration {
	if rt.cfg.RegisterTimeout == 0 {
		return 15 * time.Second
	}
	return rt.cfg.RegisterTimeout
}

func (rt *Runtime) healthInterval() time.Duration {
	if rt.cfg.HealthInterval == 0 {
		return 15 * time.Second
	}
	return rt.cfg.HealthInterval
}

func (rt *Runtime) unhealthyInterval() time.Duration {
	if rt.cfg.UnhealthyInterval == 0 {
		return min(rt.healthInterval(), 5*time.Second)
	}
	return rt.cfg.UnhealthyInterval
}

var hostOS, hostArch = runtime.GOOS, runtime.GOARCH
