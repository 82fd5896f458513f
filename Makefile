# watchkeeper: the targets a fresh machine needs. Go and make are the only
# prerequisites; modules come from the Go module proxy.
GO ?= go
# Kubernetes 1.38's modules need Go 1.27. A machine runs its own Go and
# ignores go.mod's toolchain line, so every target names the toolchain; the
# go command fetches it from the module proxy once.
export GOTOOLCHAIN ?= go1.27.3
PKGS ?= ./...
# Tests of the whole module with the race detector; integration tests start
# their own embedded etcd, so nothing else has to be running.
TEST_FLAGS ?= -race -count=1 -timeout 25m -parallel 8

# Each fuzz target runs for FUZZTIME on top of its seed corpus (which
# make test runs too). go test -fuzz takes one target in one package at a time.
FUZZTIME ?= 15s
FUZZ_FLAGS ?= -run XXX -fuzztime $(FUZZTIME) -fuzzminimizetime 5s

.PHONY: all build test test-compact fuzz verify lint run bench-bookmarks bench bench-quick update-codegen soak e2e image kube-apiserver kube-e2e kube-e2e-build kube-load

all: build

build:
	$(GO) build $(PKGS)

# With the default PKGS, the tools' module (hack/: bench, soak, the docs
# link check) is tested too.
test:
	$(GO) test $(TEST_FLAGS) $(PKGS)
ifeq ($(PKGS),./...)
	$(GO) -C hack test $(TEST_FLAGS) ./...
endif

# The cacher's and the integration suites (the storage conformance suite
# among them) again with every cache holding its objects in compact form
# (--watch-cache-compact): the tests judge that mode as they judge the default.
test-compact:
	WATCHKEEPER_TEST_COMPACT=1 $(GO) test $(TEST_FLAGS) ./cacher/ ./integration/

fuzz:
	$(GO) test $(FUZZ_FLAGS) -fuzz '^FuzzCalendar$$' ./bookmarks/
	$(GO) test $(FUZZ_FLAGS) -fuzz '^FuzzTracker$$' ./watchlist/
	$(GO) test $(FUZZ_FLAGS) -fuzz '^FuzzFlags$$' ./options/
	$(GO) test $(FUZZ_FLAGS) -fuzz '^FuzzResourceOverrides$$' ./options/
	$(GO) test $(FUZZ_FLAGS) -fuzz '^FuzzParseRV$$' ./cacher/

verify:
	hack/verify.sh

# The linters alone (make verify runs them too): staticcheck, unparam and
# go-errorlint, pinned in hack/tools/go.mod.
lint:
	hack/lint.sh

# Regenerates the sample apiserver's generated code (hack/verify.sh checks it).
update-codegen:
	hack/update-codegen.sh

# make run ARGS="--watch-cache-bookmark-frequency=5s"
run:
	hack/run.sh $(ARGS)

bench-bookmarks:
	$(GO) test -run XXX -bench . -benchmem ./bookmarks/

# watchkeeper against upstream's cacher, both in one run: results.jsonl,
# results.md and charts in _output/bench/ (git-ignored: a run's output;
# docs/performance.md keeps the figures). Narrow it with BENCH_FLAGS, e.g.
# make bench BENCH_FLAGS="-scenarios idle,fanout -levels storage".
# hack/ is a module of its own; the tools run from the repository's root,
# where they build the sample apiserver.
bench:
	$(GO) -C hack build -o ../bin/bench ./bench
	bin/bench $(BENCH_FLAGS)

# The same at small sizes and a 20s bookmark period: about 4 minutes.
bench-quick:
	$(GO) -C hack build -o ../bin/bench ./bench
	bin/bench -quick $(BENCH_FLAGS)

# The bounded soak (not part of make test): writers, thousands of watchers
# and WatchList informers, etcd restarts and compactions, then a check of
# every watcher against etcd's history and one line of figures. Longer:
# make soak SOAK_DURATION=30m; more knobs: SOAK_FLAGS="-watchers 5000".
SOAK_DURATION ?= 10m
soak:
	$(GO) -C hack build -o ../bin/soak ./soak
	bin/soak -duration $(SOAK_DURATION) $(SOAK_FLAGS)

# The sample apiserver aggregated behind a real kube-apiserver, on loopback,
# checked through kube-apiserver with kubectl and client-go
# (docs/aggregated.md). kube-apiserver and kubectl
# v1.38.0-beta.0 are built from k8s.io/kubernetes in the e2e/ module (its own
# go.mod): the first build takes long, later ones reuse the Go build cache.
# make e2e E2E_FLAGS=-hold sets up and waits for Ctrl-C, to use kubectl by hand.
KUBE_VERSION_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.38.0-beta.0 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=38
e2e:
	$(GO) -C e2e build -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
	$(GO) -C e2e build -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kubectl k8s.io/kubernetes/cmd/kubectl
	$(GO) build -o bin/sample-apiserver ./sample-apiserver
	$(GO) -C e2e build -o ../bin/e2e ./cmd/e2e
	bin/e2e $(E2E_FLAGS)

# kube-apiserver v1.38.0-beta.0 with watchkeeper as the watch cache of every
# resource it caches (e2e/kubeapiserver; docs/kube-apiserver.md):
# bin/kube-apiserver-watchkeeper. --watch-cache-decorator=upstream runs the
# stock cache from the same binary.
kube-apiserver:
	$(GO) -C e2e build -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kube-apiserver-watchkeeper ./cmd/kube-apiserver-watchkeeper

# That kube-apiserver judged on loopback: first its own properties (flags,
# caches, metrics, /readyz, shutdown), then Kubernetes' own e2e tests of
# [sig-api-machinery] on a cluster of etcd, it, kube-controller-manager,
# kube-scheduler and kwok's simulated nodes, once with the stock cache and
# once with watchkeeper, printed side by side (docs/kube-apiserver.md).
# Everything is built from k8s.io/kubernetes v1.38.0-beta.0 in e2e/ and kwok
# v0.8.0 in e2e/kwok/: long the first time, then from the Go build cache.
# The e2e module's own unit tests (the cluster driver, kube-load's
# arithmetic) run first.
# make kube-e2e KUBE_E2E_FLAGS="-checks=false -procs 2"; bin/kube-e2e -help.
KWOK_STAGES = $(shell $(GO) -C e2e/kwok list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
kube-e2e: kube-e2e-build
	$(GO) -C e2e test -count=1 ./internal/... ./cmd/...
	bin/kube-e2e -kwok-stages=$(KWOK_STAGES) $(KUBE_E2E_FLAGS)

kube-e2e-build: kube-apiserver
	$(GO) -C e2e build -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
	$(GO) -C e2e build -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
	$(GO) -C e2e build -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kubectl k8s.io/kubernetes/cmd/kubectl
	$(GO) -C e2e/kwok build -o ../../bin/kwok sigs.k8s.io/kwok/cmd/kwok
	$(GO) -C e2e build -o ../bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo
	$(GO) -C e2e test -c -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kubetests.test ./kubetests
	$(GO) -C e2e build -o ../bin/kube-e2e ./cmd/kube-e2e

# A cluster's load on that kube-apiserver, watchkeeper's cache and the stock
# one of the same binary in turn, each on a fresh etcd: simulated kubelets
# (a WatchList of their pods, watches of their secrets and configmaps,
# leases, node status) on kwok's nodes, deployments churning pods, a start
# storm and a kube-apiserver restart; then API call latency against SIG
# Scalability's SLOs, watch latency, CPU, memory and relists side by side
# (docs/kube-load.md). Bigger: make kube-load KUBE_LOAD_FLAGS="-nodes 1000
# -pods 10000 -profile-dir /tmp/prof"; bin/kube-load -help.
kube-load: kube-apiserver
	$(GO) -C e2e build -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
	$(GO) -C e2e build -ldflags '$(KUBE_VERSION_LDFLAGS)' -o ../bin/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
	$(GO) -C e2e/kwok build -o ../../bin/kwok sigs.k8s.io/kwok/cmd/kwok
	$(GO) -C e2e build -o ../bin/kube-load ./cmd/kube-load
	bin/kube-load -kwok-stages=$(KWOK_STAGES) $(KUBE_LOAD_FLAGS)

# The sample apiserver's OCI image, without Docker: a static binary
# (CGO_ENABLED=0) FROM scratch, user 65532, tagged
# watchkeeper/sample-apiserver:dev (deployment.yaml's image), written as
# bin/sample-apiserver-image.tar for docker load or ctr images import; then
# a test opens the tarball and checks its config and layers.
# sample-apiserver/Dockerfile builds the same with Docker.
image:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/image/sample-apiserver ./sample-apiserver
	$(GO) -C e2e run ./cmd/image -binary ../bin/image/sample-apiserver -o ../bin/sample-apiserver-image.tar
	$(GO) -C e2e test -count=1 ./image/ -args -tarball=$(CURDIR)/bin/sample-apiserver-image.tar
