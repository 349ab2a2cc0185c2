# devplumb — see README.md. Every target runs on a fresh machine after .ci/run's installs.
GO       ?= go
BIN      := bin
CMDS     := devplumb devplumbctl netdev-dp nodesim cdi-devnodes cdi-adapter
# Prebuilt real parts for the Kubernetes and Multus end-to-end tests, built from
# the Go module proxy at pinned versions into ~/.cache/devplumb (see scripts/).
KUBE_ENV  = DEVPLUMB_KUBE_APISERVER=$$(scripts/build-kube-apiserver.sh | tail -1) \
            DEVPLUMB_MULTUS=$$(scripts/build-multus.sh | tail -1) \
            DEVPLUMB_ETCD=$$(command -v etcd)
TESTFLAGS ?= -race -timeout 45m -count=1

.PHONY: all build test unit e2e bench bench-go demo fuzz lint images cni-plugins clean

all: build

# The version stamped into every binary (--version, and devplumb's VERSION
# about-string): `git describe` of the checkout, or VERSION=v1.2.3 for a
# release. A plain `go build` shows the module version and VCS revision.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS  := $(if $(VERSION),-X github.com/devplumb/devplumb/pkg/version.version=$(VERSION))

# devplumb starts once per CNI call: static, stripped and without gRPC's x/net/trace
# (grpcnotrace) it starts faster and smaller (see make bench).
LEAN := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -tags grpcnotrace

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(filter-out devplumb,$(CMDS)))
	$(LEAN) -o $(BIN)/ ./cmd/devplumb

# The CNI plugins and cnitool at the versions pinned in go.mod (tool directives).
cni-plugins:
	@mkdir -p $(BIN)/cni
	$(GO) build -o $(BIN)/cni/ $$($(GO) list -f '{{.ImportPath}}' tool | grep -v '^$$')

# Unit, integration and end-to-end tests, with -race, as root.
test:
	$(KUBE_ENV) $(GO) test $(TESTFLAGS) ./...

unit:
	$(GO) test $(TESTFLAGS) $$($(GO) list ./... | grep -v /e2e)

e2e:
	$(KUBE_ENV) $(GO) test $(TESTFLAGS) ./e2e/...

# The packages whose tests define $(1) (Benchmark, Fuzz): only those are built
# and run, so no end-to-end TestMain starts an API server for nothing.
pkgs_with = $$(grep -rl --include='*_test.go' '^func $(1)' . | xargs -r -n1 dirname | sort -u)

# P1-P5 of devplumb's cost per pod start, as root, with Multus thin and a real
# kube-apiserver: a table, and bench/results/results.md and chart.png.
# BENCHFLAGS e.g. "-runs 10 -baseline old/devplumb".
BENCHFLAGS ?=
bench: build cni-plugins
	$(KUBE_ENV) DEVPLUMB_MULTUS_THICK=$$(scripts/build-multus.sh thick | tail -1) \
	  $(GO) run ./bench/cmd/bench -kube $(BENCHFLAGS)

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

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...

images:
	@command -v docker >/dev/null && docker info >/dev/null 2>&1 || { echo "make images needs a running Docker engine"; exit 1; }
	docker build -f images/devplumb/Dockerfile -t devplumb:dev .
	docker build -f images/netdev-dp/Dockerfile -t netdev-dp:dev .

clean:
	rm -rf $(BIN)
