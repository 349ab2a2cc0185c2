#!/bin/bash
# Build Multus from the Go module proxy at a pinned version: thin (the `multus` CNI binary,
# for e2e/multus and the bench) or thick (the `multus-shim` CNI binary and the
# `multus-daemon` it talks to over a unix socket, for the bench). `go install pkg@version`
# does not work for this module here (the proxy refuses to list its versions), so it is
# built in a throwaway module with an explicit version.
#
# Usage: scripts/build-multus.sh          # thin: prints the multus binary's path on the last line
#        scripts/build-multus.sh thick    # thick: prints the directory holding multus-shim
#                                         # and multus-daemon on the last line
# Env:   MULTUS_VERSION (default v4.2.3), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_MULTUS=$(scripts/build-multus.sh | tail -1)
#        export DEVPLUMB_MULTUS_THICK=$(scripts/build-multus.sh thick | tail -1)
set -euo pipefail
FLAVOUR=${1:-thin}
MULTUS_VERSION=${MULTUS_VERSION:-v4.2.3}
MODULE=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
CACHE=${DEVPLUMB_CACHE:-${HOME:-/root}/.cache/devplumb}
case $FLAVOUR in
thin) OUT=$CACHE/bin/multus-$MULTUS_VERSION; CMDS=(multus) ;;
thick) OUT=$CACHE/bin/multus-thick-$MULTUS_VERSION; CMDS=(multus-shim multus-daemon) ;;
*) echo "build-multus.sh: unknown flavour $FLAVOUR (thin or thick)" >&2; exit 2 ;;
esac
# built says whether every binary of the flavour is there (thick: a directory of two).
built() {
	if [ "$FLAVOUR" = thin ]; then [ -x "$OUT" ]; else [ -x "$OUT/multus-shim" ] && [ -x "$OUT/multus-daemon" ]; fi
}
if built; then echo "$OUT"; exit 0; fi

WORK=$CACHE/build/multus-$MULTUS_VERSION
mkdir -p "$WORK" "$CACHE/bin"
# One build at a time per version (parallel CI jobs share the cache, and both flavours
# share the throwaway module): the second waits, then finds the binaries the first made.
exec 9>"$WORK.lock"
flock 9
if built; then echo "$OUT"; exit 0; fi
cd "$WORK"
export CGO_ENABLED=0 GOFLAGS="-p=2 -buildvcs=false" GOTOOLCHAIN=local
export GONOSUMDB=${GONOSUMDB:-gopkg.in/k8snetworkplumbingwg,k8s.io}
printf 'module multusbuild\n\ngo 1.25.0\n\nrequire %s %s\n' "$MODULE" "$MULTUS_VERSION" > go.mod
{
	printf '//go:build tools\n\npackage tools\n\nimport (\n'
	for c in multus multus-shim multus-daemon; do printf '\t_ "%s/cmd/%s"\n' "$MODULE" "$c"; done
	printf ')\n'
} > tools.go
go mod tidy
start=$(date +%s)
tmp=$OUT.tmp.$$
if [ "$FLAVOUR" = thin ]; then
	go build -trimpath -ldflags='-s -w' -o "$tmp" "$MODULE/cmd/multus"
else
	mkdir -p "$tmp"
	for c in "${CMDS[@]}"; do go build -trimpath -ldflags='-s -w' -o "$tmp/$c" "$MODULE/cmd/$c"; done
	rm -rf "$OUT"
fi
mv "$tmp" "$OUT"
echo "built multus $FLAVOUR $MULTUS_VERSION in $(( $(date +%s) - start ))s" >&2
echo "$OUT"
