//go:build unix

package cli_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/cli"
)

type sink struct{ text strings.Builder }

func (s *sink) WriteEvent(e execution.Event) error {
	if e.Kind == execution.EventDelta {
		s.text.WriteString(e.Text)
	}
	return nil
}

func lookPath(t *testing.T, name string) string {
	for _, dir := range []string{"/bin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("%s not found", name)
	return ""
}

func run(t *testing.T, a *cli.Adapter, ctx context.Context, prompt string) (string, error) {
	var s sink
	_, err := a.Run(ctx, &execution.RunRequest{RunID: "r", ProviderID: a.Info().ID, Target: "m",
		Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: prompt}}}}, &s)
	return s.text.String(), err
}

func TestStdinAndPlaceholder(t *testing.T) {
	cat, err := cli.New(cli.Config{ID: "cat", Argv: []string{lookPath(t, "cat")}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(t, cat, context.Background(), "héllo; $(rm -rf /) `x`")
	if err != nil || out != "héllo; $(rm -rf /) `x`" {
		t.Fatalf("stdin: %q %v", out, err)
	}
	echo, err := cli.New(cli.Config{ID: "echo", Argv: []string{lookPath(t, "echo"), "-n", "{prompt}"}, Placeholder: "{prompt}"})
	if err != nil {
		t.Fatal(err)
	}
	out, err = run(t, echo, context.Background(), "a b; c")
	if err != nil || out != "a b; c" {
		t.Fatalf("placeholder: %q %v", out, err)
	}
	// A prompt that begins with "-" is refused where it would be an
	// option (echo took "-E" as one and printed nothing), and taken as an
	// operand after "--".
	out, err = run(t, echo, context.Background(), "-E")
	var fail *execution.Failure
	if !errors.As(err, &fail) || fail.Class != execution.FailureInvalidRequest || out != "" {
		t.Fatalf("a prompt that is an option: %q %v, want an invalid request", out, err)
	}
	base, err := cli.New(cli.Config{ID: "basename", Argv: []string{lookPath(t, "basename"), "--", "{prompt}"}, Placeholder: "{prompt}"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err = run(t, base, context.Background(), "--output=x"); err != nil || out != "--output=x\n" {
		t.Fatalf("a prompt after --: %q %v", out, err)
	}
	late, err := cli.New(cli.Config{ID: "late", Argv: []string{lookPath(t, "basename"), "{prompt}", "--"}, Placeholder: "{prompt}"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = run(t, late, context.Background(), "-x"); !errors.As(err, &fail) || fail.Class != execution.FailureInvalidRequest {
		t.Fatalf("a \"--\" after the placeholder ends nothing: %v", err)
	}
}

func TestEnvironmentIsAllowListed(t *testing.T) {
	t.Setenv("IOP_TEST_SECRET_TOKEN", "leak")
	t.Setenv("IOP_TEST_ALLOWED", "ok")
	env, err := cli.New(cli.Config{ID: "env", Argv: []string{lookPath(t, "env")}, Env: []string{"IOP_TEST_ALLOWED"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(t, env, context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "leak") || !strings.Contains(out, "IOP_TEST_ALLOWED=ok") {
		t.Fatalf("child environment:\n%s", out)
	}
}

func TestExitStatusIsProviderFailure(t *testing.T) {
	f, err := cli.New(cli.Config{ID: "false", Argv: []string{lookPath(t, "false")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run(t, f, context.Background(), "")
	var fail *execution.Failure
	if !errors.As(err, &fail) || fail.Class != execution.FailureProvider {
		t.Fatalf("err %v", err)
	}
}

// TestCancelKillsProcessGroup: the operator's command starts a grandchild;
// cancelling the run kills both.
func TestCancelKillsProcessGroup(t *testing.T) {
	sh := lookPath(t, "sh")
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	// The operator's template: a shell script that leaves a grandchild.
	script := filepath.Join(dir, "tool.sh")
	os.WriteFile(script, []byte("#!"+sh+"\nsleep 300 &\necho $! > "+pids+"\necho $$ >> "+pids+"\necho started\nwait\n"), 0o755)
	a, err := cli.New(cli.Config{ID: "tool", Argv: []string{script}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(t, a, ctx, "")
		done <- err
	}()
	var ids []int
	for deadline := time.Now().Add(10 * time.Second); len(ids) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("script did not start")
		}
		b, _ := os.ReadFile(pids)
		ids = ids[:0]
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				ids = append(ids, n)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	var f *execution.Failure
	if err := <-done; !errors.As(err, &f) || f.Class != execution.FailureCanceled {
		t.Fatalf("Run = %v, want canceled", err)
	}
	for _, pid := range ids {
		for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("process %d survived the cancel", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []cli.Config{
		{ID: "x", Argv: []string{"cat"}},
		{ID: "x"},
		{ID: "x", Argv: []string{"/bin/echo", "{p}", "{p}"}, Placeholder: "{p}"},
		{ID: "x", Argv: []string{"/bin/echo", "--msg={p}"}, Placeholder: "{p}"},
		{ID: "x", Argv: []string{"/bin/echo"}, Placeholder: "{p}"},
		{ID: "x", Argv: []string{"/bin/echo"}, Env: []string{"A=B"}},
	} {
		if _, err := cli.New(c); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}
