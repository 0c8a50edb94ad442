package ollama

import (
	"bytes"
	"context"
	"testing"

	"github.com/iop-dev/iop/execution/adapters/internal/adaptertest"
)

// FuzzReadChat feeds /api/chat answers to the adapter's decoder: whatever
// the bytes, a run ends either with a classified failure and no usage,
// or with well-formed events that end in the usage.
func FuzzReadChat(f *testing.F) {
	f.Add([]byte(`{"message":{"role":"assistant","content":"a","thinking":"t"},"done":false}` + "\n" +
		`{"message":{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":false}` + "\n" +
		`{"done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":2}` + "\n"))
	f.Add([]byte(`{"error":"model not found"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var evs adaptertest.Events
		res, err := readChat(context.Background(), bytes.NewReader(body), &evs)
		adaptertest.CheckRun(t, res, err, evs, true)
	})
}
