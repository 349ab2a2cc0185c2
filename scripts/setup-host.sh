#!/bin/bash
# Install the Debian packages the tests need, when they are missing and this runs as root
# (make test and make e2e run it first; elsewhere it only says what is missing):
#   iproute2       network namespaces, veth pairs (ip)
#   etcd-server    the store behind the real kube-apiserver (e2e/kubeapi, e2e/multus, e2e/node)
#   runc           the OCI runtime under the real node's containerd (e2e/node)
#   busybox-static the shell and tools of the devplumb image and of e2e/node's test pods
#   util-linux     unshare, nsenter, flock, mount (e2e/node's mount namespace, the scripts)
#   procps         pgrep (make demo)
#   qemu-user-static  runs the arm64 images' binaries and unit tests here (images/arm64)
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have ip || need+=(iproute2)
have etcd || need+=(etcd-server)
have runc || need+=(runc)
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
{ have unshare && have nsenter && have flock; } || need+=(util-linux)
have pgrep || need+=(procps)
have qemu-aarch64-static || need+=(qemu-user-static)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! have apt-get; then
	echo "setup-host: missing Debian packages: ${need[*]} (run make test as root to install them)" >&2
	exit 0
fi

# shellcheck source=scripts/apt-lib.sh
. "${0%/*}/apt-lib.sh"
APT_WHO=setup-host
echo "setup-host: installing Debian packages: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${need[@]}"
