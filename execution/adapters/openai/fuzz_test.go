package openai

import (
	"bytes"
	"context"
	"testing"

	"github.com/iop-dev/iop/execution/adapters/internal/adaptertest"
)

// FuzzReadAnswer feeds a provider's answer, whole and as a stream, to the
// adapter's decoders: whatever the bytes, a run ends either with a
// failure of a provider's classes, or with well-formed events and a
// normalized stop reason (usage only where the provider sent it).
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"content":"hi","reasoning_content":"r","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`))
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"content":"a","tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"x\""}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}` + "\n\n" + "data: [DONE]\n\n"))
	f.Add([]byte(`data: {"error":{"message":"busy","code":503}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var whole, stream adaptertest.Events
		res, err := readAnswer(context.Background(), bytes.NewReader(body), false, &whole)
		adaptertest.CheckRun(t, res, err, whole, false)
		res, err = readAnswer(context.Background(), bytes.NewReader(body), true, &stream)
		adaptertest.CheckRun(t, res, err, stream, false)
	})
}
