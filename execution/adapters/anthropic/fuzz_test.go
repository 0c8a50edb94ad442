package anthropic

import (
	"bytes"
	"context"
	"testing"

	"github.com/iop-dev/iop/execution/adapters/internal/adaptertest"
)

// FuzzReadAnswer feeds a provider's answer, whole and as a stream, to the
// adapter's decoders: whatever the bytes, a run ends either with a
// classified failure and no usage, or with well-formed events that end
// in the usage.
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte(`{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":2}}`))
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":4}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var whole, stream adaptertest.Events
		res, err := readAnswer(context.Background(), bytes.NewReader(body), false, &whole)
		adaptertest.CheckRun(t, res, err, whole, true)
		res, err = readAnswer(context.Background(), bytes.NewReader(body), true, &stream)
		adaptertest.CheckRun(t, res, err, stream, true)
	})
}
