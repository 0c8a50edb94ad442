package controlplane

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/wire/iopv1"
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
	// Times no RFC 3339 text can carry (JSON would refuse the whole
	// status): read as absent.
	far, _ := proto.Marshal(&iopv1.EdgeNodeSnapshot{NodeId: "n", ConnectedUnixMs: math.MaxInt64, CertificateExpiryUnixMs: 253402300800000,
		ProviderSnapshots: []*iopv1.ProviderSnapshot{{ProviderId: "p", CoolingUntilUnixMs: math.MaxInt64,
			CoolingModelsUnixMs: map[string]int64{"m": math.MaxInt64, "": 1, "ok": 1}}}})
	f.Add(append(protowire.AppendVarint(nil, uint64(len(far))), far...), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, n uint16) {
		nodes, err := readSnapshots(bytes.NewReader(data), int(n))
		if err == nil && len(nodes) != int(n) {
			t.Fatalf("%d nodes for %d announced", len(nodes), n)
		}
		// What was read is what the operator's API serves: it encodes.
		if _, err := json.Marshal(nodes); err != nil {
			t.Fatalf("the Nodes read do not encode as JSON: %v", err)
		}
	})
}
