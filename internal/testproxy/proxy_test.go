package testproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves lines back; at EOF it writes "bye" and closes.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.Write([]byte("bye\n"))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func TestForwardPauseResetHalfClose(t *testing.T) {
	p := New(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	c.Write([]byte("one\n"))
	if l, _ := r.ReadString('\n'); l != "one\n" {
		t.Fatalf("forward: %q", l)
	}

	p.Pause()
	c.Write([]byte("two\n"))
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.ReadString('\n'); !errors.Is(err, syscall.ETIMEDOUT) && !isTimeout(err) {
		t.Fatalf("bytes moved while paused: %v", err)
	}
	p.Resume()
	c.SetReadDeadline(time.Time{})
	if l, _ := r.ReadString('\n'); l != "two\n" {
		t.Fatalf("after resume: %q", l)
	}

	// Half-close: the server sees EOF and can still answer.
	c.(*net.TCPConn).CloseWrite()
	if l, _ := r.ReadString('\n'); l != "bye\n" {
		t.Fatalf("half-close: %q", l)
	}

	// Reset: the client sees a reset, not a clean EOF.
	c2, _ := net.Dial("tcp", p.Addr())
	defer c2.Close()
	c2.Write([]byte("x\n"))
	bufio.NewReader(c2).ReadString('\n')
	p.Reset()
	_, err = c2.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after a reset: %v", err)
	}

	// Blackhole: new connections are reset at once.
	p.Blackhole()
	c3, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = c3.Read(make([]byte, 1))
		c3.Close()
	}
	if err == nil {
		t.Fatal("a blackholed proxy served a new connection")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
