// Package httpauth reads the credential an HTTP request presents in its
// Authorization header.
package httpauth

import (
	"net/http"
	"strings"
)

// One returns the value of header name in h when it appears exactly once.
// A credential header sent twice is ambiguous (which one a proxy on the
// way, or the server, reads differs), so a caller refuses it rather than
// guess: present is true whenever the header appears, and ok only when it
// appears once.
func One(h http.Header, name string) (value string, present, ok bool) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", false, false
	case 1:
		return vs[0], true, true
	}
	return "", true, false
}

// Bearer returns the token of an Authorization value that uses the Bearer
// scheme ("Bearer <token>"). The scheme's name is matched without regard
// to case, as RFC 9110 section 11.1 has it (clients send "bearer" too),
// and the token is trimmed of spaces and tabs. ok is false for any other
// scheme and for an empty token.
func Bearer(authorization string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(authorization, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.Trim(rest, " \t")
	return token, token != ""
}
