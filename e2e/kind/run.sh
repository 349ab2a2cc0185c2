#!/usr/bin/env bash
# The e2e/node scenarios on a kind cluster with Multus thin: see README.md. Not run in CI.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER=${CLUSTER:-devplumb}
NODE=$CLUSTER-control-plane
say() { printf '\n== %s\n' "$*"; }
fail() { echo "kind e2e: $*" >&2; exit 1; }

if [ "${1:-}" = down ]; then kind delete cluster --name "$CLUSTER"; exit 0; fi
: "${MULTUS_MANIFEST:?set MULTUS_MANIFEST to Multus thin v4.3.0 deployments/multus-daemonset.yml}"
for c in docker kind kubectl go make; do command -v "$c" >/dev/null || fail "needs $c"; done

# wait_for SECONDS WHAT COMMAND...
wait_for() {
	local until=$(( $(date +%s) + $1 )) what=$2; shift 2
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$until" ] || fail "timed out waiting for $what"
		sleep 2
	done
}

say "cluster, images, the node's devices and CNI plugins"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER"
# The tag the manifests name: the chart's appVersion (go test ./deployments keeps them equal).
TAG=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$REPO/deployments/helm/devplumb/Chart.yaml")
[ -n "$TAG" ] || fail "no appVersion in deployments/helm/devplumb/Chart.yaml"
make -C "$REPO" images VERSION="$TAG"
for img in devplumb netdev-dp; do kind load image-archive --name "$CLUSTER" "$REPO/bin/images/$img.tar"; done
docker exec "$NODE" sh -c 'for n in ens2f0 ens2f1; do ip link show $n >/dev/null 2>&1 || ip link add $n type veth peer name ${n}p; done; mkdir -p /var/run/vswitch/vhu'
PLUGINS=$(mktemp -d)
trap 'rm -rf "$PLUGINS"' EXIT
(cd "$REPO" && CGO_ENABLED=0 go build -o "$PLUGINS/" github.com/containernetworking/plugins/plugins/main/host-device github.com/containernetworking/plugins/plugins/ipam/static)
for p in host-device static; do docker cp "$PLUGINS/$p" "$NODE:/opt/cni/bin/$p"; done

say "Multus thin"
kubectl apply -f "$MULTUS_MANIFEST"
kubectl -n kube-system rollout status ds/kube-multus-ds --timeout=5m

say "1. deployments/ as shipped"
kubectl apply -k "$REPO/deployments/"
kubectl apply -f "$REPO/deployments/nads/"
kubectl -n kube-system rollout status ds/devplumb --timeout=5m
kubectl -n kube-system rollout status ds/netdev-dp --timeout=5m
hostdev() { kubectl get node "$NODE" -o jsonpath='{.status.allocatable.example\.com/hostdev}'; }
wait_for 60 "allocatable example.com/hostdev: 2" test "$(hostdev)" = 2
for b in devplumb devplumb-direct; do
	docker exec "$NODE" test -x "/opt/cni/bin/$b" || fail "$b not installed in /opt/cni/bin"
done
echo "ok: DaemonSets ready, example.com/hostdev: 2, devplumb installed"

say "2. a pod with two attachments of one resource"
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: two-devices
  annotations: {k8s.v1.cni.cncf.io/networks: "netdev-net@net1, netdev-net@net2"}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: ["sleep", "100000"]
    resources: {limits: {example.com/hostdev: "2"}}
YAML
kubectl wait --for=condition=Ready pod/two-devices --timeout=3m
kubectl get pod two-devices -o jsonpath='{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}'; echo
for i in net1 net2; do kubectl exec two-devices -- ip link show "$i" >/dev/null || fail "no $i in the pod"; done
docker exec "$NODE" sh -c '! ip link show ens2f0 && ! ip link show ens2f1' >/dev/null 2>&1 || fail "a device is still on the node"
echo "ok: both devices in the pod (net1, net2)"

say "4. pod deleted: devices back"
kubectl delete pod two-devices --wait
wait_for 60 "devices back on the node" docker exec "$NODE" sh -c 'ip link show ens2f0 && ip link show ens2f1'
echo "ok: kind e2e passed"
