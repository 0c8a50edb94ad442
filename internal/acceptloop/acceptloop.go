// Package acceptloop is the accept loop of the listeners IOP serves its own
// links on (the Edge's Node listener, the Hub's Edge listener): an Accept
// failure that passes is retried after a growing delay instead of ending
// the listener for good.
package acceptloop

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Delays between retries of a failing Accept: doubled from MinDelay on each
// failure in a row, at most MaxDelay, reset by a connection.
const (
	MinDelay = 5 * time.Millisecond
	MaxDelay = time.Second
)

// Retryable reports whether an Accept error passes by itself: a timeout, or
// the process or the system out of descriptors, buffers or memory (the
// connection waits in the backlog until there is room again). Anything else,
// a closed listener first, ends the loop.
func Retryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range [...]error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Serve accepts connections on ln and hands each to handle until Accept
// fails for good or handle returns an error. stop is closed when the owner
// stops, before it closes ln: a failed Accept then returns closed, and so
// does a retry delay it cuts short. handle's error is returned as it is. A
// retryable failure is logged and retried after the delay.
func Serve(ln net.Listener, log hclog.Logger, stop <-chan struct{}, closed error, handle func(net.Conn) error) error {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-stop:
				return closed
			default:
			}
			if !Retryable(err) {
				return err
			}
			delay = min(max(2*delay, MinDelay), MaxDelay)
			log.Warn("accept failed; retrying", "error", err, "delay", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return closed
			}
			continue
		}
		delay = 0
		if err := handle(nc); err != nil {
			return err
		}
	}
}
