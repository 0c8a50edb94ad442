package upstream

import "testing"

func TestAllowed(t *testing.T) {
	routes := []Route{{"POST", "/v1/chat/completions"}, {"GET", "/v1/responses/{id}"}, {"GET", "/api/tags"}}
	cases := []struct {
		method, path string
		want         bool
	}{
		{"POST", "/v1/chat/completions", true},
		{"GET", "/v1/chat/completions", false},
		{"POST", "/v1/chat/completions/", false},
		{"POST", "/v1/chat/completions?x=1", false},
		{"POST", "/v1//chat/completions", false},
		{"POST", "/v1/../v1/chat/completions", false},
		{"POST", "/v1/chat/%63ompletions", false},
		{"POST", "v1/chat/completions", false},
		{"GET", "/v1/responses/resp_123-abc", true},
		{"GET", "/v1/responses/../../admin", false},
		{"GET", "/v1/responses/a/b", false},
		{"GET", "/v1/responses/", false},
		{"GET", "/api/tags", true},
		{"DELETE", "/api/tags", false},
		{"POST", "/api/pull", false},
	}
	for _, c := range cases {
		if got := Allowed(routes, c.method, c.path); got != c.want {
			t.Errorf("Allowed(%s %s) = %v, want %v", c.method, c.path, got, c.want)
		}
	}
}
