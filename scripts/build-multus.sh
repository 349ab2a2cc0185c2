#!/bin/bash
# Build Multus thin (the `multus` CNI binary) from the Go module proxy at a pinned version,
# for e2e/multus. `go install pkg@version` does not work for this module here (the proxy
# refuses to list its versions), so it is built in a throwaway module with an explicit version.
#
# Usage: scripts/build-multus.sh             # prints the binary's path on the last line
# Env:   MULTUS_VERSION (default v4.2.3), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_MULTUS=$(scripts/build-multus.sh | tail -1)
set -euo pipefail
MULTUS_VERSION=${MULTUS_VERSION:-v4.2.3}
MODULE=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
CACHE=${DEVPLUMB_CACHE:-${HOME:-/root}/.cache/devplumb}
OUT=$CACHE/bin/multus-$MULTUS_VERSION
if [ -x "$OUT" ]; then echo "$OUT"; exit 0; fi

WORK=$CACHE/build/multus-$MULTUS_VERSION
mkdir -p "$WORK" "$CACHE/bin"
# One build at a time per version (parallel CI jobs share the cache): the second waits,
# then finds the binary the first made.
exec 9>"$WORK.lock"
flock 9
if [ -x "$OUT" ]; then echo "$OUT"; exit 0; fi
cd "$WORK"
export CGO_ENABLED=0 GOFLAGS="-p=2 -buildvcs=false" GOTOOLCHAIN=local
export GONOSUMDB=${GONOSUMDB:-gopkg.in/k8snetworkplumbingwg,k8s.io}
printf 'module multusbuild\n\ngo 1.25.0\n\nrequire %s %s\n' "$MODULE" "$MULTUS_VERSION" > go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/multus"\n' "$MODULE" > tools.go
go mod tidy
start=$(date +%s)
go build -trimpath -ldflags='-s -w' -o "$OUT.tmp.$$" "$MODULE/cmd/multus"
mv "$OUT.tmp.$$" "$OUT"
echo "built multus $MULTUS_VERSION in $(( $(date +%s) - start ))s" >&2
echo "$OUT"
