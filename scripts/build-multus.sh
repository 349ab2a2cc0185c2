#!/bin/bash
# Build Multus from the Go module proxy at a pinned version: thin (the `multus` CNI binary,
# for e2e/multus and the bench) or thick (the `multus-shim` CNI binary and the
# `multus-daemon` it talks to over a unix socket, for e2e/node and the bench). `go install pkg@version`
# does not work for this module here (the proxy refuses to list its versions), so it is
# built in a throwaway module with an explicit version.
#
# Usage: scripts/build-multus.sh          # thin: prints the multus binary's path on the last line
#        scripts/build-multus.sh thick    # thick: prints the directory holding multus-shim
#                                         # and multus-daemon on the last line
# Env:   MULTUS_VERSION (default v4.3.0), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_MULTUS=$(scripts/build-multus.sh | tail -1)
#        export DEVPLUMB_MULTUS_THICK=$(scripts/build-multus.sh thick | tail -1)
set -euo pipefail
# shellcheck source=scripts/build-lib.sh
. "$(dirname "$0")/build-lib.sh"
FLAVOUR=${1:-thin}
MULTUS_VERSION=${MULTUS_VERSION:-v4.3.0}
MODULE=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
case $FLAVOUR in
thin) OUT=$CACHE/bin/multus-$MULTUS_VERSION; CMDS=(multus) ;;
thick) OUT=$CACHE/bin/multus-thick-$MULTUS_VERSION; CMDS=(multus-shim multus-daemon) ;;
*) echo "build-multus.sh: unknown flavour $FLAVOUR (thin or thick)" >&2; exit 2 ;;
esac
# built says whether every binary of the flavour is there (thick: a directory of two).
built() {
	if [ "$FLAVOUR" = thin ]; then [ -x "$OUT" ]; else [ -x "$OUT/multus-shim" ] && [ -x "$OUT/multus-daemon" ]; fi
}
# Both flavours share the throwaway module (and so its lock).
build_begin "multus-$MULTUS_VERSION"
export GONOSUMDB=${GONOSUMDB:-gopkg.in/k8snetworkplumbingwg,k8s.io}
gomod_require multusbuild "$MODULE" "$MULTUS_VERSION"
tools_go "$MODULE/cmd/multus" "$MODULE/cmd/multus-shim" "$MODULE/cmd/multus-daemon"
build_tidy
tmp=$OUT.tmp.$$
if [ "$FLAVOUR" = thin ]; then
	go build -trimpath -ldflags='-s -w' -o "$tmp" "$MODULE/cmd/multus"
else
	mkdir -p "$tmp"
	for c in "${CMDS[@]}"; do go build -trimpath -ldflags='-s -w' -o "$tmp/$c" "$MODULE/cmd/$c"; done
	rm -rf "$OUT"
fi
mv "$tmp" "$OUT"
build_done "multus $FLAVOUR $MULTUS_VERSION"
