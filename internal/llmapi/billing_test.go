package llmapi_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/internal/llmapi"
)

// billing is the first system block of Claude Code's requests (its cch
// changes with every request).
const billing = `{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.337.a23; cc_entrypoint=cli; cch=1f0e2;"}`

// TestDropBillingHeader: Claude Code's billing header leaves a relayed
// Anthropic body (a block that is only the header, the header line of a
// block or of a string system prompt) and nothing else changes: the
// other blocks keep their bytes and cache_control, the messages are not
// touched. A body without the header in its system prompt is returned as
// it came, the same slice.
func TestDropBillingHeader(t *testing.T) {
	rest := `{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}`
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ name, in, want string }{
		{"a block of its own", `{"model":"m",` + msgs + `,"system":[` + billing + `,` + rest + `],"max_tokens":9}`,
			`{"model":"m",` + msgs + `,"system":[` + rest + `],"max_tokens":9}`},
		{"the only block", `{"system":[` + billing + `],` + msgs + `}`, `{"system":[],` + msgs + `}`},
		{"a block's first line",
			`{"system":[{"cache_control":{"type":"ephemeral"},"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.337.a23;\nYou are <Claude Code>."}],` + msgs + `}`,
			`{"system":[{"cache_control":{"type":"ephemeral"},"type":"text","text":"You are \u003cClaude Code\u003e."}],` + msgs + `}`},
		{"two lines of it", `{"system":"x-anthropic-billing-header: a;\nx-anthropic-billing-header: b;\nBe brief.",` + msgs + `}`,
			`{"system":"Be brief.",` + msgs + `}`},
		{"a string", `{"system":"x-anthropic-billing-header: cc_version=2.1.337.a23;\nBe brief.",` + msgs + `}`,
			`{"system":"Be brief.",` + msgs + `}`},
	} {
		out, err := llmapi.DropBillingHeader([]byte(c.in))
		if err != nil || string(out) != c.want {
			t.Errorf("%s: %v\ngot  %s\nwant %s", c.name, err, out, c.want)
		}
	}
	for _, b := range []string{
		`{"system":[` + rest + `],` + msgs + `}`,
		// Not at the start of a system text block.
		`{"system":[{"type":"text","text":"Say x-anthropic-billing-header: cc_version=1;"}],` + msgs + `}`,
		`{"system":"Say\nx-anthropic-billing-header: cc_version=1;",` + msgs + `}`,
		// Not a text block; not in the system prompt.
		`{"system":[{"type":"other","text":"x-anthropic-billing-header: cc_version=1;"}],` + msgs + `}`,
		`{"system":"S","messages":[{"role":"user","content":"x-anthropic-billing-header: cc_version=1;"}]}`,
		`{"messages":[{"role":"user","content":[` + billing + `]}]}`,
	} {
		in := []byte(b)
		if out, err := llmapi.DropBillingHeader(in); err != nil || !bytes.Equal(out, in) || &out[0] != &in[0] {
			t.Errorf("%s: changed to %s (%v)", b, out, err)
		}
	}
	if _, err := llmapi.DropBillingHeader([]byte(`["x-anthropic-billing-header:"]`)); err == nil {
		t.Error("a body that is not an object was not refused")
	}
}

// TestBillingHeaderNotTranslated: a translated request's system prompt
// leaves Claude Code's billing header out, a block that is only the
// header and the header line of a longer one.
func TestBillingHeaderNotTranslated(t *testing.T) {
	ir, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":9,"system":[` + billing + `,` +
		`{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.337.a23;\nYou are Claude Code."},{"type":"text","text":"Be brief."}],` +
		`"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"You are Claude Code.", "Be brief."}, ir.System); d != "" {
		t.Errorf("system (-want +got):\n%s", d)
	}
	b, err := llmapi.EncodeChat(ir, "m")
	if err != nil || strings.Contains(string(b), "billing") {
		t.Errorf("chat: %s (%v)", b, err)
	}
}
