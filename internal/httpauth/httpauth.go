// Package httpauth reads the credential an HTTP request presents in its
// Authorization header.
package httpauth

import "strings"

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
