package llmapi

import (
	"encoding/json"
	"errors"
)

// ErrUnsupported is returned when a request uses a feature the target
// cannot carry (tools or images to a text-only provider): it is refused,
// never dropped.
var ErrUnsupported = errors.New("llmapi: feature not supported by this provider")

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("llmapi: marshal: " + err.Error())
	}
	return b
}
