# devplumb — see README.md. Every target runs on a fresh machine after .ci/run's installs.
GO       ?= go
BIN      := bin
CMDS     := devplumb devplumbctl netdev-dp nodesim
# Prebuilt real parts for the Kubernetes, Multus and real-node end-to-end tests, built
# from the Go module proxy at pinned versions into ~/.cache/devplumb (see scripts/). The
# node's Kubernetes binaries come after the apiserver: they share its compiled packages.
KUBE_ENV  = DEVPLUMB_KUBE_APISERVER=$$(scripts/build-kube-apiserver.sh | tail -1) \
            DEVPLUMB_KUBE_NODE=$$(scripts/build-kube-node.sh | tail -1) \
            DEVPLUMB_CONTAINERD=$$(scripts/build-containerd.sh | tail -1) \
            DEVPLUMB_MULTUS=$$(scripts/build-multus.sh | tail -1) \
            DEVPLUMB_ETCD=$$(command -v etcd)
TESTFLAGS ?= -race -timeout 45m -count=1

.PHONY: all build test unit e2e bench demo fuzz lint images cni-plugins clean setup

all: build

# Release builds: static (no libc needed) and stripped, as the images have them.
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

# The CNI plugins and cnitool at the versions pinned in go.mod (tool directives).
cni-plugins:
	@mkdir -p $(BIN)/cni
	$(GO) build -o $(BIN)/cni/ $$($(GO) list -f '{{.ImportPath}}' tool | grep -v '^$$')

# The Debian packages the tests need (installed when root; scripts/setup-host.sh says which).
setup:
	@scripts/setup-host.sh

# Unit, integration and end-to-end tests, with -race, as root.
test: setup
	$(KUBE_ENV) $(GO) test $(TESTFLAGS) ./...

unit: setup
	$(GO) test $(TESTFLAGS) $$($(GO) list ./... | grep -v /e2e)

e2e: setup
	$(KUBE_ENV) $(GO) test $(TESTFLAGS) ./e2e/...

# The packages whose tests define $(1) (Benchmark, Fuzz): only those are built
# and run, so no end-to-end TestMain starts an API server for nothing.
pkgs_with = $$(grep -rl --include='*_test.go' '^func $(1)' . | xargs -r -n1 dirname | sort -u)

bench:
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

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...

# The images as docker-archive tarballs, built without Docker (the code the real-node
# tests use): bin/images/devplumb.tar and netdev-dp.tar, for `docker load -i` or
# `ctr -n k8s.io images import`. Needs a static busybox (Debian busybox-static).
images:
	$(GO) run ./images/build -o $(BIN)/images

clean:
	rm -rf $(BIN)
