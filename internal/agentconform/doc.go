// Package agentconform holds tests only: the real Claude Code and Codex
// command-line clients, the builds users install from npm, do a small task
// through a real Edge and Node on loopback, against a fake provider in
// each format a route's provider may speak (so relayed untranslated and
// translated both ways). The model thinks and calls the client's shell
// tool twice at once (parallel calls), the client runs both commands in a
// scratch directory, sends their output back (and the thinking, which an
// Anthropic-format provider needs back in a tool loop), and the model's
// answer, which names the output, is what the client prints. The model is
// slow to begin and pauses between chunks, so each client is also sent the
// Edge's keep-alives, which a tap between it and the Edge counts. A task
// the model refuses as past its context window, in vLLM's words, ends each
// client as its own API's refusal would. Codex, given a model name it
// offers apply_patch to, applies the patch the model sends as the
// freeform call Codex expects.
//
// These clients send what no SDK's test does (Claude Code a system message
// among its messages and a billing line that changes with every request,
// Codex its developer messages and namespaced tools), and they act
// on errors by their words and codes. Running them found the Edge refusing
// Claude Code's system message, passing its billing line on, and telling a
// context overflow in words neither client knew.
//
// The binaries are IOP_CLAUDE and IOP_CODEX, or claude and codex on PATH.
// A client that is missing skips its test, unless IOP_REQUIRE_CLIENTS=1;
// .ci/run sets it after `make clients` has installed the versions the
// Makefile pins into .cache/clients.
package agentconform
