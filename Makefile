# Tools are pinned: protoc-gen-go through the tool directive in go.mod,
# protoc through Debian's protobuf-compiler package (installed by .ci/run),
# staticcheck by version here (run from the module proxy, so that it adds
# nothing to the module's requirements; staticcheck.conf says which checks).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PROTO_DIR := wire/proto
PROTO_FILES := $(wildcard $(PROTO_DIR)/iop/v1/*.proto)

# The agent clients internal/agentconform runs, pinned: the builds users
# install from npm, into .cache/clients (make clients; .ci/run does).
CLAUDE_CODE := @anthropic-ai/claude-code@2.1.337
CODEX := @openai/codex@0.171.0
CLIENTS_DIR := .cache/clients

.PHONY: proto test lint ci clients

proto:
	@command -v protoc >/dev/null || { echo "protoc missing: run .ci/run or apt-get install protobuf-compiler" >&2; exit 1; }
	protoc -I $(PROTO_DIR) \
		--plugin=protoc-gen-go=$$(go tool -n protoc-gen-go) \
		--go_out=. --go_opt=module=github.com/iop-dev/iop \
		$(PROTO_FILES)

test:
	go test -race ./...

# staticcheck loads packages through 'go list -export', which compiles
# them. GOFLAGS=-race reaches that go list (staticcheck itself is built
# without it: -race=false on go run's command line wins), so its builds
# are the ones 'go vet -race' and 'go test -race' make and a fresh machine
# compiles everything once, not twice (80 s against 190 s of .ci/run's
# staticcheck step). No file depends on the race build tag.
lint:
	GOFLAGS="$$GOFLAGS -race" go run -race=false $(STATICCHECK) ./...

# npm links each client's command into $(CLIENTS_DIR)/node_modules/.bin;
# the test finds them through IOP_CLAUDE and IOP_CODEX.
clients:
	@command -v npm >/dev/null || { echo "npm missing: run .ci/run or apt-get install npm" >&2; exit 1; }
	npm install --prefix $(CLIENTS_DIR) --no-save --no-audit --no-fund --loglevel=error $(CLAUDE_CODE) $(CODEX) </dev/null

ci:
	bash .ci/run
