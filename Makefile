# Tools are pinned: protoc-gen-go through the tool directive in go.mod,
# protoc through Debian's protobuf-compiler package (installed by .ci/run),
# staticcheck by version here (run from the module proxy, so that it adds
# nothing to the module's requirements; staticcheck.conf says which checks).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PROTO_DIR := wire/proto
PROTO_FILES := $(wildcard $(PROTO_DIR)/iop/v1/*.proto)

.PHONY: proto test lint ci

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

ci:
	bash .ci/run
