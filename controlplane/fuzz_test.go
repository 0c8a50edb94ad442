package controlplane

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/edge/nodes"
)

// FuzzReadSnapshots feeds the status stream decoder the bytes an Edge (or
// anything that dialed the Hub) could send: it returns Nodes or an error,
// never panics, and never allocates beyond its bounds.
func FuzzReadSnapshots(f *testing.F) {
	var good []byte
	for _, id := range []string{"n1", "n2"} {
		b, _ := proto.Marshal(nodeToWire(nodes.NodeSnapshot{ID: id, Connected: true, Providers: []nodes.ProviderSnapshot{{ID: "p", Adapter: "openai", Capacity: 2}}}))
		good = protowire.AppendVarint(good, uint64(len(b)))
		good = append(good, b...)
	}
	f.Add(good, uint16(2))
	f.Add(good, uint16(3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, n uint16) {
		nodes, err := readSnapshots(bytes.NewReader(data), int(n))
		if err == nil && len(nodes) != int(n) {
			t.Fatalf("%d nodes for %d announced", len(nodes), n)
		}
	})
}
