//go:build !unix

package h1

import "net"

// peeker has no peek where there is no MSG_PEEK; a connection the
// upstream closed while idle is caught by the retry instead.
type peeker struct{}

func (*peeker) init(net.Conn) {}
func (*peeker) alive() bool   { return true }
