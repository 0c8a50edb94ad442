package credentiallease_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/iop-dev/iop/credentiallease"
)

// An Edge issues a lease for one dispatch on a Node; the Node opens it
// once, right before the provider call.
func Example() {
	// Edge: a signing key Nodes pin by id.
	_, edgeKey, _ := ed25519.GenerateKey(rand.Reader)
	issuer, _ := credentiallease.NewIssuer("edge-key-1", edgeKey, 0)

	// Node: its encryption key (LoadOrCreateNodeKey in a real Node) and an
	// opener with a replay cache (OpenReplayFile in a real Node).
	nodeKey, _ := credentiallease.GenerateNodeKey()
	opener, _ := credentiallease.NewOpener(credentiallease.OpenerConfig{
		NodeID: "gpu-box", Key: nodeKey,
		EdgeKeys: map[string]ed25519.PublicKey{"edge-key-1": issuer.PublicKey()},
		Replay:   credentiallease.NewReplayCache(),
	})

	binding := credentiallease.Binding{Principal: "alice", Route: "claude", Slot: "run_1", Profile: "anthropic",
		Target: "claude-sonnet-4", NodeID: "gpu-box", NodeKeyID: nodeKey.ID(), CredentialID: "anthropic-prod",
		CredentialRevision: 1, Generation: 42}
	lease, _ := issuer.Issue(binding, nodeKey.PublicKey(), []byte("sk-ant-example"))

	dispatch := credentiallease.Expect{Principal: "alice", Route: "claude", Slot: "run_1", Profile: "anthropic",
		Target: "claude-sonnet-4", CredentialID: "anthropic-prod", Generation: 42}
	secret, err := opener.Open(lease, dispatch)
	fmt.Println(string(secret.Bytes()), err)
	secret.Clear()

	_, err = opener.Open(lease, dispatch)
	fmt.Println(errors.Is(err, credentiallease.ErrReplayed))
	// Output:
	// sk-ant-example <nil>
	// true
}
