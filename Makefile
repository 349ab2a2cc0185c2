# devplumb — see README.md. Every target runs on a fresh machine after .ci/run's installs.
GO       ?= go
BIN      := bin
CMDS     := devplumb devplumb-direct devplumb-agent devplumbctl netdev-dp nodesim cdi-devnodes cdi-adapter
# Prebuilt real parts for the Kubernetes, Multus and real-node end-to-end tests, built
# from the Go module proxy at pinned versions into ~/.cache/devplumb (see scripts/). The
# node's Kubernetes binaries come after the apiserver: they share its compiled packages.
# K8S_VERSION picks the Kubernetes release of the matrix (README, "Supported Kubernetes").
K8S_VERSION ?= v1.37.2
export K8S_VERSION
KUBE_ENV  = DEVPLUMB_KUBE_APISERVER=$$(scripts/build-kube-apiserver.sh | tail -1) \
            DEVPLUMB_KUBE_NODE=$$(scripts/build-kube-node.sh | tail -1) \
            DEVPLUMB_CONTAINERD=$$(scripts/build-containerd.sh | tail -1) \
            DEVPLUMB_MULTUS=$$(scripts/build-multus.sh | tail -1) \
            DEVPLUMB_MULTUS_THICK=$$(scripts/build-multus.sh thick | tail -1) \
            DEVPLUMB_ETCD=$$(command -v etcd)
# The static arm64 busybox of the arm64 devplumb image that images/arm64 builds and runs
# under qemu-user-static (scripts/fetch-busybox.sh: Debian's busybox-static:arm64).
ARM64_ENV = DEVPLUMB_ARM64_BUSYBOX=$$(scripts/fetch-busybox.sh linux/arm64 | sed 's/^-busybox [^=]*=//')
TESTFLAGS ?= -race -timeout 45m -count=1

.PHONY: all build shallow-note test test-k8s unit e2e bench bench-go demo demo-dra fuzz lint images release cni-plugins clean setup

all: build

# The version stamped into every binary (--version, and devplumb's VERSION
# about-string): `git describe` of the checkout, or VERSION=v1.2.3 for a
# release. A plain `go build` shows the module version and VCS revision.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS  := -s -w $(if $(VERSION),-X github.com/devplumb/devplumb/pkg/base/version.version=$(VERSION))

# Release builds: static (no libc needed) and stripped, as the images have them.
# devplumb-direct starts once per CNI call without an agent: without gRPC's
# x/net/trace (grpcnotrace) it starts faster and smaller (see make bench), and the
# agent (devplumb-agent) keeps less memory. The entry point devplumb links no gRPC at all.
STATIC := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'

build:
	@mkdir -p $(BIN)
	$(STATIC) -o $(BIN)/ $(addprefix ./cmd/,$(filter-out devplumb-direct devplumb-agent,$(CMDS)))
	$(STATIC) -tags grpcnotrace -o $(BIN)/ ./cmd/devplumb-direct ./cmd/devplumb-agent

# The CNI plugins and cnitool at the versions pinned in go.mod (tool directives).
cni-plugins:
	@mkdir -p $(BIN)/cni
	$(GO) build -o $(BIN)/cni/ $$($(GO) list -f '{{.ImportPath}}' tool | grep -v '^$$')

# The Debian packages the tests need (installed when root; scripts/setup-host.sh says which),
# and QEMU >= 8.0 for e2e/vm (scripts/setup-qemu.sh: on Debian 12 from bookworm-backports).
setup:
	@scripts/setup-host.sh
	@scripts/setup-qemu.sh

# A shallow clone (git clone --depth 1, many CI systems' default) lacks the earlier release
# e2e/node's upgrade test builds: the test fetches it from origin, or is skipped. Said first.
shallow-note:
	@[ "$$(git rev-parse --is-shallow-repository 2>/dev/null)" != true ] || \
		echo "make: this is a shallow clone: e2e/node TestUpgradeAndDowngrade needs a full clone (git fetch --unshallow); it fetches the commit it needs from origin, or is skipped"

# Unit, integration and end-to-end tests, with -race, as root.
test: shallow-note setup
	$(KUBE_ENV) $(ARM64_ENV) $(GO) test $(TESTFLAGS) ./...

# The Kubernetes suites (API server, DRA, real node) at one release of the matrix:
# make test-k8s K8S_VERSION=v1.35.4 (or v1.36.3; the default is the newest).
KUBE_SUITES := ./e2e/kubeapi/... ./e2e/dra/... ./e2e/node/...
test-k8s: shallow-note setup
	$(KUBE_ENV) $(GO) test $(TESTFLAGS) $(KUBE_SUITES)

unit: setup
	$(ARM64_ENV) $(GO) test $(TESTFLAGS) $$($(GO) list ./... | grep -v /e2e)

e2e: shallow-note setup
	$(KUBE_ENV) $(GO) test $(TESTFLAGS) ./e2e/...

# The packages whose tests define $(1) (Benchmark, Fuzz): only those are built
# and run, so no end-to-end TestMain starts an API server for nothing.
pkgs_with = $$(grep -rl --include='*_test.go' '^func $(1)' . | xargs -r -n1 dirname | sort -u)

# P1-P10 of devplumb's cost per pod start, as root, with Multus thin and thick, a real
# kube-apiserver and the node agent (bin/devplumb-agent): a table, and
# bench/results/results.md and chart.png (docs/performance.md). The committed run
# (the defaults: -runs 30 -pairs 360 -soak 1000) took about 6 minutes on 2 CPUs.
# BENCHFLAGS e.g. "-runs 10 -baseline old/devplumb", "-only P1,P7 -soak 0".
BENCHFLAGS ?=
bench: build cni-plugins
	$(STATIC) -o $(BIN)/bench-passthrough ./bench/passthrough
	$(KUBE_ENV) $(GO) run ./bench/cmd/bench -kube $(BENCHFLAGS)

# The Go micro-benchmarks of the libraries.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem $(call pkgs_with,Benchmark)

# Runs each fuzz target for FUZZTIME (the seed corpora also run in `make test`).
FUZZTIME ?= 60s
fuzz:
	@set -e; for pkg in $(call pkgs_with,Fuzz); do \
	  for f in $$(grep -h --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' -r $$pkg | cut -c6-); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

demo: build cni-plugins
	$(GO) build -o $(BIN)/vswitch ./scripts/vswitch
	./scripts/demo.sh

# The same path with DRA: a real kube-apiserver (built as the tests build it), netdev-dp
# as a DRA driver, nodesim allocating and preparing the pod's claim, devplumb writing
# network-status and the claim's status.devices.
demo-dra: build cni-plugins
	$(GO) build -o $(BIN)/kubeapi ./scripts/kubeapi
	DEVPLUMB_KUBE_APISERVER=$$(scripts/build-kube-apiserver.sh | tail -1) DEVPLUMB_ETCD=$$(command -v etcd) \
	  ./scripts/demo-dra.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...

# The images as docker-archive tarballs, built without Docker (the code the real-node
# tests use): bin/images/devplumb.tar and netdev-dp.tar, for `docker load -i` or
# `ctr -n k8s.io images import`. Needs a static busybox (Debian busybox-static).
# The binaries are built as `build` builds them, stamped with VERSION, and the images
# are tagged with it: devplumb:$(VERSION), netdev-dp:$(VERSION).
# PLATFORMS=linux/amd64,linux/arm64 builds each (bin/images/linux-arm64/...) and an OCI
# layout per image holding all (bin/images/oci/devplumb, for `crane push`); the static
# busybox of a platform other than this machine's is Debian's, fetched by
# scripts/fetch-busybox.sh (BUSYBOX_ARGS="-busybox linux/arm64=PATH" names another).
PLATFORMS ?=
BUSYBOX_ARGS ?=
images:
	$(GO) run ./images/build -o $(BIN)/images -version '$(VERSION)' \
	  $(if $(PLATFORMS),-platforms $(PLATFORMS) $$(scripts/fetch-busybox.sh $(PLATFORMS))) $(BUSYBOX_ARGS)

# A release: make release VERSION=v1.2.3 sets the chart's appVersion (the manifests and
# docs follow), turns CHANGELOG.md's Unreleased section into the release's, commits and
# tags (pushing nothing), builds the images for RELEASE_PLATFORMS (default linux/amd64 and
# linux/arm64) and writes bin/release/$(VERSION).md, the release notes (scripts/release.sh).
release:
	$(if $(filter command line environment,$(origin VERSION)),,$(error make release needs VERSION=vX.Y.Z))
	scripts/release.sh '$(VERSION)'

clean:
	rm -rf $(BIN)
