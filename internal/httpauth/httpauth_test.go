package httpauth

import "testing"

func TestBearer(t *testing.T) {
	for _, tc := range []struct {
		in, token string
		ok        bool
	}{
		{"Bearer sk-1", "sk-1", true},
		{"bearer sk-1", "sk-1", true},
		{"BEARER sk-1", "sk-1", true},
		{"Bearer   sk-1 \t", "sk-1", true},
		{"Bearer a b", "a b", true}, // not a token68: the key lookup refuses it
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer \t ", "", false},
		{"Bearersk-1", "", false},
		{"Bearer\tsk-1", "", false},
		{"Basic YWxpY2U6eA==", "", false},
		{"Bear sk-1", "", false},
		{" Bearer sk-1", "", false},
		{"", "", false},
	} {
		token, ok := Bearer(tc.in)
		if token != tc.token || ok != tc.ok {
			t.Errorf("Bearer(%q) = %q, %v; want %q, %v", tc.in, token, ok, tc.token, tc.ok)
		}
	}
}
