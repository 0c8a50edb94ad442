package llmapi

import (
	"encoding/json"
	"errors"
	"strings"
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

// trimJSONSpace trims the whitespace JSON allows around a value (space,
// tab, line feed, carriage return) and no other: strings.TrimSpace would
// also trim a form feed or a no-break space, which leave arguments that
// are no JSON to a client that parses them as sent.
func trimJSONSpace(s string) string { return strings.Trim(s, " \t\n\r") }
