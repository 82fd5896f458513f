# watchkeeper: the targets a fresh machine needs. Go and make are the only
# prerequisites; modules come from the Go module proxy.
GO ?= go
PKGS ?= ./...
# Tests of the whole module with the race detector; integration tests start
# their own embedded etcd, so nothing else has to be running.
TEST_FLAGS ?= -race -count=1 -timeout 25m

.PHONY: all build test verify run bench-bookmarks

all: build

build:
	$(GO) build $(PKGS)

test:
	$(GO) test $(TEST_FLAGS) $(PKGS)

verify:
	hack/verify.sh

run:
	hack/run.sh

bench-bookmarks:
	$(GO) test -run XXX -bench . -benchmem ./bookmarks/
