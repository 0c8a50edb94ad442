package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
)

// ErrALPN is returned when a TLS peer did not negotiate the iop/1
// application protocol.
var ErrALPN = errors.New("wire: peer did not negotiate ALPN " + ALPN)

// TLSClientConfig returns a copy of base for dialing IOP sessions: TLS 1.3
// only, ALPN iop/1. For mutual TLS, base carries the client certificate.
func TLSClientConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	if c == nil {
		c = &tls.Config{}
	}
	c.MinVersion = tls.VersionTLS13
	c.NextProtos = []string{ALPN}
	return c
}

// TLSServerConfig returns a copy of base for accepting IOP sessions: TLS 1.3
// only, ALPN iop/1. When base has ClientCAs but no ClientAuth, client
// certificates become required and verified: a configured CA pool always
// means mutual TLS, never an optional check.
func TLSServerConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	if c == nil {
		c = &tls.Config{}
	}
	c.MinVersion = tls.VersionTLS13
	c.NextProtos = []string{ALPN}
	if c.ClientCAs != nil && c.ClientAuth == tls.NoClientCert {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// Dial connects to addr and starts the dialing side of a session. With a
// non-nil tlsConf the connection runs TLS 1.3 with ALPN iop/1 (see
// TLSClientConfig); with nil it is plain TCP, for loopback and development.
// As with tls.Dial, a tlsConf without ServerName verifies the host of addr
// (a name or an IP address). ctx bounds the dial and both handshakes.
func Dial(ctx context.Context, network, addr string, tlsConf *tls.Config, cfg *Config) (*Session, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("wire: dial: %w", err)
	}
	if tlsConf != nil {
		c := TLSClientConfig(tlsConf)
		if c.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			c.ServerName = host
		}
		tc := tls.Client(conn, c)
		if err := handshakeTLS(ctx, tc, cfg); err != nil {
			return nil, err
		}
		conn = tc
	}
	return newSession(ctx, conn, cfg, true)
}

// Accept starts the accepting side of a session on a connection taken from
// a listener. With a non-nil tlsConf it first runs the TLS 1.3 server
// handshake (see TLSServerConfig) and requires ALPN iop/1. ctx bounds both
// handshakes, as does Config.HandshakeTimeout. On error conn is closed.
func Accept(ctx context.Context, conn net.Conn, tlsConf *tls.Config, cfg *Config) (*Session, error) {
	if tlsConf != nil {
		tc := tls.Server(conn, TLSServerConfig(tlsConf))
		if err := handshakeTLS(ctx, tc, cfg); err != nil {
			return nil, err
		}
		conn = tc
	}
	return newSession(ctx, conn, cfg, false)
}

func handshakeTLS(ctx context.Context, tc *tls.Conn, cfg *Config) error {
	hctx, cancel := context.WithTimeout(ctx, cfg.settings().handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		tc.Close()
		return fmt.Errorf("wire: tls handshake: %w", err)
	}
	if tc.ConnectionState().NegotiatedProtocol != ALPN {
		tc.Close()
		return ErrALPN
	}
	return nil
}
