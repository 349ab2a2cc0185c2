# shellcheck shell=bash
# Sourced by scripts/build-*.sh: what every build of a pinned upstream binary does alike.
# A build runs in a throwaway Go module in $CACHE/build/<name> (a module that requires the
# upstream one at the pinned version and imports its commands from tools.go), one build at
# a time per work directory under a flock, and puts the result at $OUT only when done. The
# script prints $OUT on its last line, built or found in the cache (the Makefile takes it
# with `tail -1`).
#
# A script sets OUT and defines built() (are all of its binaries at $OUT?), then:
#   build_begin NAME             # prints $OUT and exits if built; else locks, cds into the work dir
#   gomod_require NAME MOD VER   # or gomod_kubernetes NAME: the throwaway go.mod
#   tools_go PKG...              # tools.go importing the commands
#   build_tidy                   # go mod tidy; the build's clock starts
#   ... go build ... -o "$OUT.tmp..."; mv into $OUT
#   build_done WHAT              # "built WHAT in Ns" on stderr, $OUT on stdout
set -euo pipefail
CACHE=${DEVPLUMB_CACHE:-${HOME:-/root}/.cache/devplumb}

# build_begin NAME: the cached result, or the work directory $CACHE/build/NAME held
# locked (parallel CI jobs share the cache: the second waits, then finds what the first
# made) and the environment every build uses.
build_begin() {
	if built; then echo "$OUT"; exit 0; fi
	WORK=$CACHE/build/$1
	mkdir -p "$WORK" "$CACHE/bin"
	exec 9>"$WORK.lock"
	flock 9
	if built; then echo "$OUT"; exit 0; fi
	cd "$WORK"
	export CGO_ENABLED=0 GOFLAGS="-p=2 -buildvcs=false" GOTOOLCHAIN=local
}

# gomod_require NAME MODULE VERSION: a go.mod requiring MODULE at VERSION.
gomod_require() {
	printf 'module %s\n\ngo 1.25.0\n\nrequire %s %s\n' "$1" "$2" "$3" > go.mod
}

# gomod_kubernetes NAME: a go.mod requiring k8s.io/kubernetes at $K8S_VERSION with every
# staging module replaced by its published v0.<minor>.<patch> version. k8s.io/kubernetes
# cannot be fetched with `go install pkg@version` (the proxy refuses to list its versions
# and its staging modules are replaced by relative paths).
gomod_kubernetes() {
	# The checksum database has no entry for k8s.io/kubernetes tags as seen from here.
	export GONOSUMDB=${GONOSUMDB:-k8s.io/kubernetes}
	local modfile staging m
	# The staging module list comes from k8s.io/kubernetes's own go.mod at that tag.
	printf 'module probe\ngo 1.25.0\n' > go.mod
	# A release that needs a newer Go is downloaded all the same but reported as an error
	# (k8s_toolchain then picks that Go); without its go.mod the download failed.
	go mod download -json "k8s.io/kubernetes@$K8S_VERSION" > dl.json || true
	modfile=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' dl.json)
	if [ ! -f "$modfile" ]; then echo "download k8s.io/kubernetes@$K8S_VERSION failed:" >&2; cat dl.json >&2; exit 1; fi
	staging=$(grep -E '^\s*k8s.io/\S+ => ./staging' "$modfile" | awk '{print $1}')
	k8s_toolchain "$modfile"
	if [ -z "$staging" ]; then echo "no staging modules found in $modfile" >&2; exit 1; fi
	{
		echo "module $1"
		echo "go 1.25.0"
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo "replace ("
		for m in $staging; do echo "	$m => $m v0.${K8S_VERSION#v1.}"; done
		echo ")"
	} > go.mod
}

# k8s_toolchain MODFILE: builds with the Go release Kubernetes at $K8S_VERSION pins in its
# .go-version (its go.mod's go line when the file is missing) if the local Go is older than
# that go line (1.38 needs Go 1.27): the go command fetches that toolchain from the module
# proxy as the module golang.org/toolchain.
k8s_toolchain() {
	local need have dir
	need=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$1")
	have=$(GOTOOLCHAIN=local go env GOVERSION); have=${have#go}
	if [ -z "$need" ] || [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" = "$need" ]; then
		return 0
	fi
	dir=$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION
	GOTOOLCHAIN=go$(cat "$dir/.go-version" 2>/dev/null || echo "$need")
	echo "Kubernetes $K8S_VERSION needs Go $need (local: $have): building with $GOTOOLCHAIN" >&2
	export GOTOOLCHAIN
}

# k8s_ldflags: the version stamp of a Kubernetes binary built at $K8S_VERSION.
k8s_ldflags() {
	local minor
	minor=$(echo "$K8S_VERSION" | cut -d. -f2)
	echo "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
}

# tools_go PKG...: tools.go importing the packages, so go mod tidy keeps what they need.
tools_go() {
	local p
	{
		printf '//go:build tools\n\npackage tools\n\nimport (\n'
		for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
		printf ')\n'
	} > tools.go
}

# build_tidy: go mod tidy, then the build's clock starts.
build_tidy() {
	go mod tidy
	BUILD_START=$(date +%s)
}

# build_done WHAT: says how long the build took and prints $OUT, the script's last line.
build_done() {
	echo "built $1 in $(( $(date +%s) - BUILD_START ))s" >&2
	echo "$OUT"
}
