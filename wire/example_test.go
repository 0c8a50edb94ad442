package wire_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// Two sessions over an in-process pipe: the dialer opens a stream, sends a
// role message and some bytes, and reads the acceptor's answer.
func Example() {
	c1, c2 := net.Pipe()
	acceptor := make(chan *wire.Session, 1)
	go func() {
		s, err := wire.Server(c2, nil)
		if err != nil {
			panic(err)
		}
		acceptor <- s
	}()
	dialer, err := wire.Client(c1, nil)
	if err != nil {
		panic(err)
	}
	server := <-acceptor
	defer server.Close()
	defer dialer.Close()

	ctx := context.Background()
	go func() {
		st, err := server.AcceptStream(ctx)
		if err != nil {
			return
		}
		m, _ := st.ReadMessage(ctx)
		body, _ := io.ReadAll(st)
		fmt.Fprintf(st, "%s: %s", m.GetError().GetMessage(), body)
		st.CloseWrite()
	}()

	st, err := dialer.OpenStream(ctx)
	if err != nil {
		panic(err)
	}
	st.WriteMessage(&iopv1.Envelope{Body: &iopv1.Envelope_Error{Error: &iopv1.Error{Message: "echo"}}})
	st.Write([]byte("hello"))
	st.CloseWrite()
	reply, _ := io.ReadAll(st)
	fmt.Println(string(reply))
	<-st.Done()
	fmt.Println("terminal:", st.Terminal())
	// Output:
	// echo: hello
	// terminal: <nil>
}

// Dial and Accept run a session over TCP, with TLS 1.3 and ALPN iop/1 when
// given a tls.Config (nil means plaintext, for loopback and development).
func ExampleDial() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := wire.Accept(context.Background(), conn, nil, nil)
		if err != nil {
			return
		}
		<-s.Done() // serve until the dialer closes
		s.Close()
	}()

	s, err := wire.Dial(context.Background(), "tcp", ln.Addr().String(), nil, nil)
	if err != nil {
		panic(err)
	}
	if _, err := s.Ping(context.Background()); err != nil {
		panic(err)
	}
	s.Close()
	fmt.Println(s.Err())
	// Output: wire: session closed (local): normal
}

// A closed session reports why, and whether the peer or this side closed
// it.
func ExampleCloseError() {
	err := error(&wire.CloseError{Reason: wire.ReasonHeartbeatTimeout, Detail: "no heartbeat response within 45s"})
	var ce *wire.CloseError
	if errors.As(err, &ce) && ce.Reason == wire.ReasonHeartbeatTimeout {
		fmt.Println("fence the generation:", ce.Reason, "remote:", ce.Remote)
	}
	// Output: fence the generation: heartbeat_timeout remote: false
}
