package execution

import (
	"io"
	"net/http"
)

// TunnelRequest is a raw HTTP exchange a Node makes with a provider's
// upstream on the Edge's behalf. The path is one the adapter allows; the
// headers have passed the Node's allow-list; the body streams.
type TunnelRequest struct {
	ProviderID string
	Method     string
	// Path is the upstream path with query, for example
	// "/v1/chat/completions".
	Path   string
	Header http.Header
	Body   io.Reader
}

// TunnelWriter receives the upstream's answer in order: the status and
// headers once, then body chunks. The headers are the upstream's as it
// sent them; the writer (the Node's) relays only those its allow-list
// permits.
type TunnelWriter interface {
	WriteHead(status int, header http.Header) error
	Write(p []byte) (int, error)
}
