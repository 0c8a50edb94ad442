// Package cli is the adapter for command-line tools: each run executes an
// operator-defined, exact argv template from node.yaml, without a shell.
// The prompt goes in through stdin, or as the single argv element that
// equals the declared placeholder (a prompt that would read as an option
// is refused unless "--" comes before it); stdout streams back as output
// deltas.
// The command runs in its own process group, which is killed whole on
// cancel, deadline, or after the command exits. CLI providers serve
// normalized runs only (no raw tunnel).
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/iop-dev/iop/execution"
)

// Kind is this adapter's kind in configuration.
const Kind = "cli"

// Config configures an Adapter.
type Config struct {
	// ID is the provider id. Required.
	ID string
	// Argv is the exact command; Argv[0] must be an absolute path. No
	// shell ever interprets it.
	Argv []string
	// Placeholder, when set, is an argv element replaced by the prompt
	// (exactly one element must equal it, whole). Empty means the prompt
	// goes to stdin. A prompt that begins with "-" would be read as an
	// option of the command (a client's "--output=/etc/x"), so such a run
	// is refused as an invalid request, unless an element "--" comes
	// before the placeholder: most tools take every argument after it as
	// an operand.
	Placeholder string
	// Env names environment variables passed through from the Node's own
	// environment. Nothing else is inherited except a fixed PATH.
	Env []string
	// Dir is the working directory. Empty means the system temp directory.
	Dir string
	// Models are the names runs may target; the CLI itself decides what
	// model it uses.
	Models []string
	// MaxOutput caps stdout bytes per run. Zero means 16 MiB.
	MaxOutput int64
}

// Adapter implements execution.Provider and HealthChecker.
type Adapter struct {
	info execution.Info
	cfg  Config
	// operand says that Argv ends the options ("--") before the
	// placeholder, so a prompt beginning with "-" cannot be one.
	operand bool
}

var (
	_ execution.Provider      = (*Adapter)(nil)
	_ execution.HealthChecker = (*Adapter)(nil)
)

// New validates cfg and returns an Adapter.
func New(cfg Config) (*Adapter, error) {
	info := execution.Info{ID: cfg.ID, Adapter: Kind, Category: execution.CategoryCLI, Models: append([]string(nil), cfg.Models...)}
	if err := info.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Argv) == 0 || !filepath.IsAbs(cfg.Argv[0]) {
		return nil, fmt.Errorf("cli: provider %q: Argv[0] must be an absolute path", cfg.ID)
	}
	for i, a := range cfg.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("cli: provider %q: Argv[%d] contains NUL", cfg.ID, i)
		}
	}
	operand := false
	if cfg.Placeholder != "" {
		n := 0
		for _, a := range cfg.Argv[1:] {
			if a == "--" && n == 0 {
				operand = true
			}
			if a == cfg.Placeholder {
				n++
			} else if strings.Contains(a, cfg.Placeholder) {
				return nil, fmt.Errorf("cli: provider %q: the placeholder must be a whole argv element, not part of %q", cfg.ID, a)
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("cli: provider %q: Placeholder %q must appear exactly once in Argv[1:]", cfg.ID, cfg.Placeholder)
		}
	}
	for _, name := range cfg.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return nil, fmt.Errorf("cli: provider %q: invalid Env name %q", cfg.ID, name)
		}
	}
	if cfg.MaxOutput == 0 {
		cfg.MaxOutput = 16 << 20
	}
	cfg.Argv = append([]string(nil), cfg.Argv...)
	return &Adapter{info: info, cfg: cfg, operand: operand}, nil
}

// Info implements execution.Provider.
func (a *Adapter) Info() execution.Info { return a.info }

// CheckHealth implements execution.HealthChecker: the command must exist
// and be executable.
func (a *Adapter) CheckHealth(context.Context) error {
	st, err := os.Stat(a.cfg.Argv[0])
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return errors.New("cli: command not executable")
	}
	return nil
}

// Prompt renders a normalized conversation as the CLI's input: a lone user
// message is passed as it is; anything else as a plain transcript with
// "[system]", "[user]" and "[assistant]" headings.
func Prompt(in execution.Input) string {
	if in.System == "" && len(in.Messages) == 1 && in.Messages[0].Role == "user" {
		return in.Messages[0].Content
	}
	var b strings.Builder
	if in.System != "" {
		b.WriteString("[system]\n" + in.System + "\n\n")
	}
	for _, m := range in.Messages {
		b.WriteString("[" + m.Role + "]\n" + m.Content + "\n\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// env builds the child's environment from the allow-list.
func (a *Adapter) env() []string {
	out := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	for _, name := range a.cfg.Env {
		if v, ok := os.LookupEnv(name); ok {
			out = append(out, name+"="+v)
		}
	}
	return out
}

// utf8Split returns the longest prefix of b that does not end inside a
// UTF-8 sequence, and the rest.
func utf8Split(b []byte) ([]byte, []byte) {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i], b[len(b)-i:]
			}
			break
		}
	}
	return b, nil
}
