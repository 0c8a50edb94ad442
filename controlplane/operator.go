package controlplane

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/internal/httpauth"
	"github.com/iop-dev/iop/internal/watch"
)

// Operator authentication. An operator is recognized by, in order:
//   - Authorization: Bearer <token>, a token whose SHA-256 is an
//     Operator's TokenHash (for tools; never ambient, so never subject to
//     cross-site request forgery);
//   - the status page's session cookie, set by POST /api/login with a
//     token (HttpOnly, SameSite=Strict, Secure under TLS);
//   - with Config.OperatorMTLS, a verified client certificate.
// The last two are ambient credentials a browser attaches by itself, so a
// state-changing request made with them must also carry the session's
// CSRF token in X-CSRF-Token (GET /api/session returns it) and, when the
// browser sends one, an Origin naming this host.

const (
	sessionCookie = "iop_hub_session"
	sessionTTL    = 12 * time.Hour
	maxSessions   = 1024
	csrfHeader    = "X-CSRF-Token"
)

type operators struct {
	list   []Operator
	mtls   bool
	secret [32]byte // keys the CSRF tokens of certificate sessions

	mu       sync.Mutex
	sessions map[[32]byte]*opSession // by SHA-256 of the session id

	changes watch.Set // told after every change to the list or the sessions
}

type opSession struct {
	name      string
	tokenHash [32]byte // the token it signed in with: a reload that changes it ends the session
	csrf      string
	expires   time.Time
}

// principal is an authenticated operator.
type principal struct {
	name string
	// ambient: the credential is one a browser attaches by itself.
	ambient bool
	csrf    string
	// The credential, to check it again (valid): the cookie session's
	// key, the bearer token's hash, or the certificate's end.
	session   [32]byte
	tokenHash [32]byte
	certEnd   time.Time
}

func newOperators(list []Operator, mtls bool) *operators {
	o := &operators{list: list, mtls: mtls, sessions: map[[32]byte]*opSession{}}
	rand.Read(o.secret[:])
	return o
}

// byToken returns the operator a token belongs to, comparing against every
// operator in constant time.
func (o *operators) byToken(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	o.mu.Lock()
	list := o.list
	o.mu.Unlock()
	return tokenOwner(list, token)
}

// tokenOwner returns the operator of list whose token it is, comparing
// against every one in constant time.
func tokenOwner(list []Operator, token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	name, found := "", false
	for _, op := range list {
		if subtle.ConstantTimeCompare(sum[:], op.TokenHash[:]) == 1 {
			name, found = op.Name, true
		}
	}
	return name, found
}

// authenticate returns the request's operator, if any.
func (o *operators) authenticate(r *http.Request) (principal, bool) {
	auth, present, once := httpauth.One(r.Header, "Authorization")
	if present && !once {
		return principal{}, false // sent twice: ambiguous
	}
	if auth != "" {
		token, ok := httpauth.Bearer(auth)
		if !ok {
			return principal{}, false
		}
		name, ok := o.byToken(token)
		return principal{name: name, tokenHash: sha256.Sum256([]byte(token))}, ok
	}
	// A session cookie sent twice (one a sibling site set for the parent
	// domain, say) is ambiguous: neither signs in.
	if cs := r.CookiesNamed(sessionCookie); len(cs) == 1 {
		key := sha256.Sum256([]byte(cs[0].Value))
		o.mu.Lock()
		s := o.sessions[key]
		if s != nil && time.Now().After(s.expires) {
			delete(o.sessions, key)
			s = nil
		}
		o.mu.Unlock()
		if s != nil {
			return principal{name: s.name, ambient: true, csrf: s.csrf, session: key}, true
		}
	}
	if o.mtls && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		if name, ok := operatorCertName(leaf); ok {
			mac := hmac.New(sha256.New, o.secret[:])
			mac.Write(leaf.Raw)
			return principal{name: name, ambient: true, csrf: hex.EncodeToString(mac.Sum(nil)), certEnd: leaf.NotAfter}, true
		}
	}
	return principal{}, false
}

// operatorCertName returns the operator a verified client certificate
// names: its common name. A certificate without one names no one, and
// neither does a workload's: one carrying a SPIFFE ID (an Edge's or a
// Node's, from package edge/identity) is a machine's credential, never an
// operator's, even where the operator CA and the workload CA are one.
func operatorCertName(leaf *x509.Certificate) (string, bool) {
	if hasSPIFFE(leaf) {
		return "", false
	}
	name := leaf.Subject.CommonName
	return name, name != ""
}

// certNamesEdge reports whether a verified client certificate names Edge
// id outside managed mode. A workload's certificate (one with a SPIFFE
// ID) names only the Edge its ID names, so that a Node's certificate
// from a CA the Hub trusts can never pass for an Edge of the same name;
// any other names the Edge of its common name or of one of its DNS names.
func certNamesEdge(leaf *x509.Certificate, id string) bool {
	if !hasSPIFFE(leaf) {
		return leaf.Subject.CommonName == id || slices.Contains(leaf.DNSNames, id)
	}
	_, kind, named, err := identity.Workload(leaf)
	return err == nil && kind == identity.KindEdge && named == id
}

// hasSPIFFE reports whether a certificate carries a SPIFFE URI, well
// formed or not.
func hasSPIFFE(leaf *x509.Certificate) bool {
	return slices.ContainsFunc(leaf.URIs, func(u *url.URL) bool { return strings.EqualFold(u.Scheme, "spiffe") })
}

// login starts a cookie session for a token's operator. The token is
// checked against the list under the same hold of the lock that adds the
// session: a reload between the two would otherwise end the operator's
// sessions before this one came, and it would outlive the operator.
func (o *operators) login(token string) (id string, s *opSession, ok bool) {
	if token == "" {
		return "", nil, false
	}
	var raw, csrf [32]byte
	rand.Read(raw[:])
	rand.Read(csrf[:])
	id = hex.EncodeToString(raw[:])
	o.mu.Lock()
	name, ok := tokenOwner(o.list, token)
	if !ok {
		o.mu.Unlock()
		return "", nil, false
	}
	s = &opSession{name: name, csrf: hex.EncodeToString(csrf[:]), expires: time.Now().Add(sessionTTL)}
	now := time.Now()
	for k, v := range o.sessions {
		if now.After(v.expires) {
			delete(o.sessions, k)
		}
	}
	evicted := len(o.sessions) >= maxSessions
	if evicted {
		var oldest [32]byte
		var at time.Time
		for k, v := range o.sessions {
			if at.IsZero() || v.expires.Before(at) {
				oldest, at = k, v.expires
			}
		}
		delete(o.sessions, oldest)
	}
	s.tokenHash = sha256.Sum256([]byte(token))
	o.sessions[sha256.Sum256([]byte(id))] = s
	o.mu.Unlock()
	if evicted {
		o.changes.Notify()
	}
	return id, s, true
}

// setList replaces the operators; sessions of operators removed, or
// whose token changed, end.
func (o *operators) setList(list []Operator) {
	o.mu.Lock()
	o.list = list
	for k, s := range o.sessions {
		if !slices.ContainsFunc(list, func(op Operator) bool { return op.Name == s.name && op.TokenHash == s.tokenHash }) {
			delete(o.sessions, k)
		}
	}
	o.mu.Unlock()
	o.changes.Notify()
}

func (o *operators) logout(p principal) {
	o.mu.Lock()
	delete(o.sessions, p.session)
	o.mu.Unlock()
	o.changes.Notify()
}

// valid reports whether p's credential still signs it in: its session
// has not ended (signed out, expired, or its operator removed or given
// another token), its bearer token is still its operator's, or its
// certificate has not expired. A stream opened with a credential ends
// when it no longer does.
func (o *operators) valid(p principal) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case p.session != [32]byte{}:
		s := o.sessions[p.session]
		return s != nil && time.Now().Before(s.expires)
	case p.tokenHash != [32]byte{}:
		return slices.ContainsFunc(o.list, func(op Operator) bool { return op.Name == p.name && op.TokenHash == p.tokenHash })
	}
	return time.Now().Before(p.certEnd)
}

// watch calls f after every change to the operators or their sessions,
// until stop is called. The change is made before f is called: a check
// made after watch began either sees it or is followed by f.
func (o *operators) watch(f func()) (stop func()) { return o.changes.Add(f) }

// csrfOK checks a state-changing request made with an ambient credential.
func csrfOK(r *http.Request, p principal) bool {
	if !p.ambient {
		return true
	}
	if !sameOrigin(r) {
		return false
	}
	got := r.Header.Get(csrfHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(p.csrf)) == 1
}

// sameOrigin accepts a request without an Origin header (not a browser's
// cross-site request) or one whose Origin names this host.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return r.Header.Get("Sec-Fetch-Site") == "" || r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	return origin == scheme+r.Host
}
