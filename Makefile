# watchkeeper: the targets a fresh machine needs. Go and make are the only
# prerequisites; modules come from the Go module proxy.
GO ?= go
PKGS ?= ./...
# Tests of the whole module with the race detector; integration tests start
# their own embedded etcd, so nothing else has to be running.
TEST_FLAGS ?= -race -count=1 -timeout 25m

.PHONY: all build test verify run bench-bookmarks update-codegen

all: build

build:
	$(GO) build $(PKGS)

test:
	$(GO) test $(TEST_FLAGS) $(PKGS)

verify:
	hack/verify.sh

# Regenerates the sample apiserver's generated code (hack/verify.sh checks it).
update-codegen:
	hack/update-codegen.sh

# make run ARGS="--watch-cache-bookmark-frequency=5s"
run:
	hack/run.sh $(ARGS)

bench-bookmarks:
	$(GO) test -run XXX -bench . -benchmem ./bookmarks/
