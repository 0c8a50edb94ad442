// Package executiontest provides an in-process execution.Provider for tests
// of code that hosts or dispatches runs, in the spirit of net/http/httptest:
// scripted output, a run that blocks until it is cancelled, health that a
// test can flip, and a record of what happened.
package executiontest

import (
	"context"
	"errors"
	"sync"

	"github.com/iop-dev/iop/execution"
)

// Provider is a scripted execution.Provider and execution.HealthChecker.
// Its fields may be set before use; the methods are safe for concurrent
// use.
type Provider struct {
	// Meta is returned by Info.
	Meta execution.Info
	// Reply is the text streamed back, one delta per element.
	Reply []string
	// Usage, when set, is emitted after the reply.
	Usage *execution.Usage
	// ToolCalls are emitted after the reply.
	ToolCalls []execution.ToolCall
	// StopReason is returned in the Result.
	StopReason string
	// Fail, when set, is returned instead of a result after the reply.
	Fail *execution.Failure
	// Block makes every run wait, after its reply, until its context ends
	// (or Release is called), to test cancellation and fencing.
	Block bool

	mu        sync.Mutex
	unhealthy bool
	checks    int
	started   chan *execution.RunRequest
	ended     chan error
	release   chan struct{}
	runs      int
}

var (
	_ execution.Provider      = (*Provider)(nil)
	_ execution.HealthChecker = (*Provider)(nil)
)

// New returns a Provider with the given id, adapter kind "openai",
// category local and one model.
func New(id, model string) *Provider {
	return &Provider{Meta: execution.Info{ID: id, Adapter: "openai", Category: execution.CategoryLocal, Models: []string{model}}}
}

func (p *Provider) init() {
	if p.started == nil {
		p.started = make(chan *execution.RunRequest, 1024)
		p.ended = make(chan error, 1024)
		p.release = make(chan struct{})
	}
}

// Info implements execution.Provider.
func (p *Provider) Info() execution.Info { return p.Meta }

// Started receives each run's request as the run begins.
func (p *Provider) Started() <-chan *execution.RunRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	return p.started
}

// Ended receives each run's outcome as Run returns: nil, the scripted
// failure, or the context's error for a run that was cancelled.
func (p *Provider) Ended() <-chan error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	return p.ended
}

// Release lets every blocked run (and every later one) finish normally.
func (p *Provider) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

// SetHealthy flips what CheckHealth reports.
func (p *Provider) SetHealthy(ok bool) {
	p.mu.Lock()
	p.unhealthy = !ok
	p.mu.Unlock()
}

// Runs returns how many runs have started.
func (p *Provider) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// ErrUnhealthy is what CheckHealth returns after SetHealthy(false).
var ErrUnhealthy = errors.New("executiontest: provider unhealthy")

// Checks is how many times CheckHealth was called.
func (p *Provider) Checks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checks
}

// CheckHealth implements execution.HealthChecker.
func (p *Provider) CheckHealth(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checks++
	if p.unhealthy {
		return ErrUnhealthy
	}
	return nil
}

// Run implements execution.Provider.
func (p *Provider) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (res execution.Result, err error) {
	p.mu.Lock()
	p.init()
	p.runs++
	started, ended, release := p.started, p.ended, p.release
	p.mu.Unlock()
	select {
	case started <- req:
	default:
	}
	defer func() {
		select {
		case ended <- err:
		default:
		}
	}()
	for _, text := range p.Reply {
		if err := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: text}); err != nil {
			return res, err
		}
	}
	for _, tc := range p.ToolCalls {
		if err := w.WriteEvent(execution.Event{Kind: execution.EventToolCall, ToolCall: &tc}); err != nil {
			return res, err
		}
	}
	if p.Usage != nil {
		u := *p.Usage
		if err := w.WriteEvent(execution.Event{Kind: execution.EventUsage, Usage: &u}); err != nil {
			return res, err
		}
	}
	if p.Block {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-release:
		}
	}
	if p.Fail != nil {
		return res, p.Fail
	}
	return execution.Result{StopReason: p.StopReason}, ctx.Err()
}
