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

lint:
	go run $(STATICCHECK) ./...

ci:
	bash .ci/run
