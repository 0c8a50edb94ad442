package httpauth

import (
	"net/http"
	"strings"
	"testing"
)

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

func TestOne(t *testing.T) {
	h := http.Header{}
	h.Add("Authorization", "Bearer a")
	h.Add("X-Api-Key", "k1")
	h.Add("X-Api-Key", "k2")
	h.Add("Empty", "")
	for _, tc := range []struct {
		name, value   string
		present, once bool
	}{
		{"Authorization", "Bearer a", true, true},
		{"authorization", "Bearer a", true, true},
		{"X-Api-Key", "", true, false},
		{"Empty", "", true, true},
		{"Missing", "", false, false},
	} {
		v, present, once := One(h, tc.name)
		if v != tc.value || present != tc.present || once != tc.once {
			t.Errorf("One(%s) = %q, %v, %v; want %q, %v, %v", tc.name, v, present, once, tc.value, tc.present, tc.once)
		}
	}
}

// FuzzBearer holds Bearer to its rule for any header value: a token only
// after a Bearer scheme in any case and one space, never empty, never
// padded, and the value's own tail.
func FuzzBearer(f *testing.F) {
	for _, s := range []string{"Bearer sk-1", "bearer  sk-1 ", "Basic YWxpY2U6eA==", "Bearer", "BeArEr \t", "Bearer\tx", "Bearer a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		token, ok := Bearer(in)
		if !ok {
			if token != "" {
				t.Fatalf("Bearer(%q) refused but gave %q", in, token)
			}
			return
		}
		if len(in) < 7 || !strings.EqualFold(in[:7], "bearer ") {
			t.Fatalf("Bearer(%q) took a token from another scheme", in)
		}
		if token == "" || strings.Trim(token, " \t") != token || !strings.Contains(in[7:], token) || !strings.HasSuffix(strings.TrimRight(in, " \t"), token) {
			t.Fatalf("Bearer(%q) = %q", in, token)
		}
	})
}
