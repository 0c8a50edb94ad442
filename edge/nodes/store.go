package nodes

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/atomicfile"
	"github.com/iop-dev/iop/wire/iopv1"
)

// Record is the Edge's configuration of one Node: its identity, how it
// authenticates, and the providers it hosts. edge.yaml is the source of
// these; the Node never adds to them.
type Record struct {
	// ID is the node id the Node registers with.
	ID string
	// TokenHash is the SHA-256 of the Node's registration token. The token
	// itself is never stored.
	TokenHash [32]byte
	// Providers are the providers the Node hosts, in edge.yaml's order.
	Providers []ProviderSpec
	// Workspaces are the workspace refs configured on this Node, each with
	// the most authority the Edge may grant; they ride in the payload and
	// the Node accepts those its own catalog allows.
	Workspaces []*iopv1.WorkspaceGrant
}

// ProviderSpec is one provider as the Edge configures it.
type ProviderSpec struct {
	ID       string
	Adapter  string
	Category execution.Category
	Models   []string
	// Capacity is how many requests the provider runs at once, 1 to
	// MaxCapacity; LongContextCapacity how many of them may be long
	// context (0: any).
	Capacity            int
	LongContextCapacity int
	// APIs names the client APIs the provider's upstream serves natively
	// ("chat", "responses", "messages", "embeddings"); the Edge relays
	// those as they are and translates the others. Empty means the
	// adapter's default (edge.Config.Validate checks the names; an
	// ollama provider may name responses, which Ollama serves since 0.13.3,
	// besides its default chat and embeddings).
	APIs []string
	// Credential, when set, is the id of the credential this provider's
	// upstream calls use, delivered only as a credential lease with each
	// dispatch; the Node uses no local credential for it.
	Credential string
	// BillingHeader says what becomes of the billing line Claude Code
	// begins its system prompt with (x-anthropic-billing-header, which
	// changes with every request) in a request relayed untranslated to
	// this provider: "keep" or "drop". Empty means keep for a provider of
	// category api, which may be Anthropic's own API (the one reader of
	// the line), and drop for any other; drop it for a hosted API that is
	// not Anthropic's and caches prompts by prefix (DeepSeek's, say), keep
	// it for a local proxy in front of Anthropic. edge.Config.Validate
	// checks the value.
	BillingHeader string
}

// HashToken returns the value to store in Record.TokenHash for a token.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// Validate reports the first invalid field of r.
func (r Record) Validate() error {
	if err := validID(r.ID); err != nil {
		return fmt.Errorf("nodes: record: ID: %w", err)
	}
	if r.TokenHash == ([32]byte{}) {
		return fmt.Errorf("nodes: record %q: empty TokenHash", r.ID)
	}
	seen := map[string]bool{}
	for i, p := range r.Providers {
		info := execution.Info{ID: p.ID, Adapter: p.Adapter, Category: p.Category, Capacity: p.Capacity, LongContextCapacity: p.LongContextCapacity}
		if err := info.Validate(); err != nil {
			return fmt.Errorf("nodes: record %q: Providers[%d]: %w", r.ID, i, err)
		}
		if p.Capacity == 0 || p.Capacity > MaxCapacity {
			return fmt.Errorf("nodes: record %q: Providers[%d] (%q): Capacity %d outside 1..%d", r.ID, i, p.ID, p.Capacity, MaxCapacity)
		}
		if p.LongContextCapacity > p.Capacity {
			return fmt.Errorf("nodes: record %q: Providers[%d] (%q): LongContextCapacity above Capacity", r.ID, i, p.ID)
		}
		if seen[p.ID] {
			return fmt.Errorf("nodes: record %q: duplicate provider %q", r.ID, p.ID)
		}
		seen[p.ID] = true
	}
	return nil
}

// MaxCapacity bounds a provider's Capacity: far above any provider's
// concurrency, and well inside the wire's 32-bit field (a larger value
// would reach the Node truncated).
const MaxCapacity = 1 << 20

// maxIDLen bounds node and provider ids.
const maxIDLen = 128

// validID accepts ids of letters, digits, '.', '_' and '-', 1 to 128
// bytes, but "." and ".." (identity.CheckID's rule: edge/identity imports
// this package, so it cannot be called here).
func validID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("length %d outside 1..%d", len(id), maxIDLen)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%q is a dot segment", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%q has a character outside [A-Za-z0-9._-]", id)
		}
	}
	return nil
}

// Store holds the Node records. The registry reads it on every
// registration and on Refresh; implementations must be safe for concurrent
// use and return records the caller may not modify.
type Store interface {
	// Lookup returns the record for a node id.
	Lookup(id string) (Record, bool)
	// Records returns every record, sorted by id.
	Records() []Record
}

// StaticStore is an immutable Store built from a list of records.
type StaticStore struct {
	byID    map[string]Record
	records []Record
}

var _ Store = (*StaticStore)(nil)

// NewStaticStore validates the records and returns a store holding them.
func NewStaticStore(records []Record) (*StaticStore, error) {
	s := &StaticStore{byID: make(map[string]Record, len(records))}
	for _, r := range records {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if _, dup := s.byID[r.ID]; dup {
			return nil, fmt.Errorf("nodes: duplicate node id %q", r.ID)
		}
		s.byID[r.ID] = r
		s.records = append(s.records, r)
	}
	slices.SortFunc(s.records, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
	return s, nil
}

// Lookup implements Store.
func (s *StaticStore) Lookup(id string) (Record, bool) {
	r, ok := s.byID[id]
	return r, ok
}

// Records implements Store.
func (s *StaticStore) Records() []Record { return s.records }

// Hello is what a registering connection presents.
type Hello struct {
	NodeID     string
	Credential []byte
	// TLS is the connection's TLS state, nil for plaintext.
	TLS        *tls.ConnectionState
	RemoteAddr net.Addr
}

// Authenticator decides whether a registration is who it claims to be.
// Token authentication is the default; mutual-TLS identity and enrollment
// plug in here.
type Authenticator interface {
	Authenticate(ctx context.Context, h Hello) error
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(ctx context.Context, h Hello) error

// Authenticate implements Authenticator.
func (f AuthenticatorFunc) Authenticate(ctx context.Context, h Hello) error { return f(ctx, h) }

// ErrUnauthenticated is returned for an unknown node id or a wrong
// credential; the two are deliberately not told apart.
var ErrUnauthenticated = errors.New("nodes: unauthenticated")

// TokenAuthenticator checks the credential against the record's token hash
// in constant time.
type TokenAuthenticator struct {
	Store Store
}

var _ Authenticator = TokenAuthenticator{}

// Authenticate implements Authenticator.
func (a TokenAuthenticator) Authenticate(_ context.Context, h Hello) error {
	rec, ok := a.Store.Lookup(h.NodeID)
	sum := sha256.Sum256(h.Credential)
	if !ok {
		// Same work for an unknown id as for a known one.
		subtle.ConstantTimeCompare(sum[:], sum[:])
		return ErrUnauthenticated
	}
	if subtle.ConstantTimeCompare(sum[:], rec.TokenHash[:]) != 1 {
		return ErrUnauthenticated
	}
	return nil
}

// NextEpoch reads the boot epoch stored at path, increments it, stores it
// durably (package atomicfile) and returns the new value. The
// Edge calls it once at startup, so every generation it hands out is above
// those of any earlier run. A missing file starts at 1.
func NextEpoch(path string) (uint32, error) {
	var cur uint64
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		cur, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("nodes: epoch file %s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return 0, fmt.Errorf("nodes: epoch file: %w", err)
	}
	if cur >= 1<<32-1 {
		return 0, fmt.Errorf("nodes: epoch file %s: epoch exhausted", path)
	}
	next := uint32(cur + 1)
	if err := atomicfile.Write(path, []byte(strconv.FormatUint(uint64(next), 10)+"\n"), 0o600); err != nil {
		return 0, fmt.Errorf("nodes: epoch file: %w", err)
	}
	return next, nil
}
