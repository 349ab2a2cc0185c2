#!/usr/bin/env bash
# make demo-dra: the device-to-network path with DRA (Kubernetes 1.35+) on this machine,
# as root, with a real kube-apiserver and no node.
#
# kubeapi runs etcd and kube-apiserver; netdev-dp in DRA mode publishes two veth ends in a
# ResourceSlice; nodesim plays the kubelet, the scheduler and the claim controller: it makes
# the pod's claim from a template, allocates it and has netdev-dp prepare it. cnitool then
# runs devplumb, which finds the claim's device through the kubelet's PodResources, moves it
# into the pod, and writes the pod's network-status and the claim's
# status.devices[].networkData (KEP-4817). Then a pod spec written for device-plugin mode,
# resources.limits {example.com/hostdev: 2}, gets both devices through the claim the
# scheduler makes for an extended resource backed by DRA (KEP-5004), net1 and net2 one each.
# Everything is torn down at the end, on Ctrl-C,
# and when a step fails; the last step shows that nothing is left.
#
# Needs: bin/ (make build: devplumb, netdev-dp, nodesim, kubeapi) and bin/cni/ (make
# cni-plugins), or DEMO_BIN with both; DEVPLUMB_KUBE_APISERVER and DEVPLUMB_ETCD (make
# demo-dra sets them); root; iproute2; flock.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DEMO_BIN:-$REPO/bin}
CNI_BIN=$BIN/cni
NETNS=devplumb-demo-dra
NODE=demo-node POD_NS=demo POD_NAME=web
VETHS=(dpdra0 dpdra1)   # the pool; each has a peer <name>p on the host
ROOT="" PIDS=() DEMO=demo-dra STEP="checking prerequisites"
# shellcheck source=scripts/demo-lib.sh
. "$REPO/scripts/demo-lib.sh"

[ "$(id -u)" = 0 ] || fail "run as root: it creates network namespaces and veth pairs"
for b in devplumb devplumb-direct netdev-dp nodesim kubeapi; do [ -x "$BIN/$b" ] || fail "$BIN/$b missing: run make demo-dra (it builds them)"; done
for b in cnitool host-device static; do [ -x "$CNI_BIN/$b" ] || fail "$CNI_BIN/$b missing: run make demo-dra (it builds them)"; done
[ -x "${DEVPLUMB_KUBE_APISERVER:-}" ] || fail "DEVPLUMB_KUBE_APISERVER is not a kube-apiserver binary: run make demo-dra (it builds one)"
one_at_a_time

# stop_daemons: SIGTERM in reverse start order (the API server last), SIGKILL after 10 s.
stop_daemons() {
	local i pid
	for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
		pid=${PIDS[$i]}
		kill -TERM "$pid" 2>/dev/null || continue
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}

cleanup() {
	local rc=$?
	trap - EXIT
	trap '' INT TERM
	set +e
	if [ "$rc" != 0 ]; then
		echo "demo-dra: stopped during step \"$STEP\" (exit $rc); cleaning up" >&2
		show_logs
	fi
	if [ -n "$ROOT" ] && [ -f "$ROOT/net.d/fast-dra.conf" ] && ip netns list | grep -qw "$NETNS"; then
		for IFNAME in net2 net1; do cni del >/dev/null 2>&1; done
	fi
	stop_daemons
	remove_node "$ROOT"
	exit "$rc"
}

remove_node() {
	local v
	ip netns del "$NETNS" 2>/dev/null || true
	for v in "${VETHS[@]}"; do ip link del "$v" 2>/dev/null || true; done
	rm -f /var/lib/cni/results/fast-dra-cnitool-*
	[ -z "$1" ] || rm -rf "$1"
}

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

forget_killed_runs "/tmp/devplumb-demo-dra.*"
ROOT=$(mktemp -d /tmp/devplumb-demo-dra.XXXXXX)
mkdir -p "$ROOT/net.d" "$ROOT/logs" "$ROOT/node"
KUBECONFIG_FILE=$ROOT/api/kubeconfig

k() { "$BIN/kubeapi" "$1" "$KUBECONFIG_FILE" "${@:2}"; }
cni() { # cni add|del: cnitool with the pod's identity, as a container runtime calls it (ifname $IFNAME)
	CNI_PATH="$BIN:$CNI_BIN" NETCONFPATH="$ROOT/net.d" CNI_IFNAME="${IFNAME:-net1}" DEVPLUMB_NODE_CONFIG="$ROOT/node.json" \
	CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=$POD_NS;K8S_POD_NAME=$POD_NAME;K8S_POD_UID=$POD_UID" \
		"$CNI_BIN/cnitool" "$1" fast-dra "/var/run/netns/$NETNS"
}

say "1. the cluster: etcd and kube-apiserver (resource.k8s.io/v1), the DeviceClasses netdev-dp ships"
start kubeapi "$BIN/kubeapi" serve "$ROOT/api"
wait_for 180 "kube-apiserver" test -s "$KUBECONFIG_FILE"
k apply "$REPO/deployments/dra/deviceclasses.yaml"
cat >"$ROOT/claim-template.yaml" <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $POD_NS}
---
# kube-controller-manager makes each namespace's "default" ServiceAccount; none runs here,
# and the API server's ServiceAccount admission (on, as in production) refuses pods without it.
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: $POD_NS}
---
# Each pod that names this template gets a claim of its own: one example.com/hostdev device.
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: fast-net, namespace: $POD_NS}
spec:
  spec:
    devices:
      requests:
      - name: vf
        exactly: {deviceClassName: hostdev.example.com}
YAML
k apply "$ROOT/claim-template.yaml"

say "2. the node: veth ends, nodesim (the kubelet), netdev-dp --mode dra (the DRA driver)"
for v in "${VETHS[@]}"; do ip link add "$v" type veth peer name "${v}p"; ip link set "${v}p" up; done
echo "veth pool: ${VETHS[*]}"
start nodesim "$BIN/nodesim" serve --root "$ROOT/node" --kubeconfig "$KUBECONFIG_FILE" --node-name "$NODE"
# nodesim answers on its control socket once all its sockets are up (DRA registration too).
wait_for 20 "nodesim" timeout 20 "$BIN/nodesim" pods --root "$ROOT/node"
echo '{"resources": [{"resourceName": "example.com/hostdev", "netdevs": {"names": ["dpdra[0-9]"]}}]}' >"$ROOT/netdev-dp.json"
start netdev-dp "$BIN/netdev-dp" --mode dra --config "$ROOT/netdev-dp.json" --kubeconfig "$KUBECONFIG_FILE" \
	--node-name "$NODE" --kubelet-registrar-dir "$ROOT/node/plugins_registry" --kubelet-plugins-dir "$ROOT/node/plugins" \
	--devinfo-dir "$ROOT/devinfo" --cdi-dir "$ROOT/cdi"
"$BIN/nodesim" wait --root "$ROOT/node" --driver netdev.devplumb.io --timeout 30s >/dev/null ||
	fail "netdev-dp did not register as a DRA driver"
wait_for 20 "netdev-dp's ResourceSlice" bash -c "'$BIN/kubeapi' list '$KUBECONFIG_FILE' resourceslices '' spec.devices | grep -q dpdra1"
echo "--- the ResourceSlice netdev-dp published (its devices and their attributes):"
k list resourceslices "" spec.devices

say "3. a pod with a claim from the template (nodesim pod add: claim controller, scheduler and kubelet)"
"$BIN/nodesim" pod add --root "$ROOT/node" --namespace "$POD_NS" --name "$POD_NAME" \
	--claim net=template:fast-net --container app=claim:net
POD_UID=$(k get pods "$POD_NS" "$POD_NAME" metadata.uid)
CLAIM=$(k get pods "$POD_NS" "$POD_NAME" status.resourceClaimStatuses.0.resourceClaimName)
echo "--- claim $CLAIM, as the scheduler allocated it:"
k get resourceclaims "$POD_NS" "$CLAIM" status.allocation.devices.results

say "4. the pod's network namespace, and devplumb through cnitool"
ip netns add "$NETNS"
# The config a NetworkAttachmentDefinition would hold: resourceName finds the device of
# any of the pod's claims whose attribute k8s.cni.cncf.io/resourceName names it, through
# the kubelet's PodResources (no API read). The node config (the node's administrator's,
# named in the runtime's environment as cni() does) holds the node's paths and the
# kubeconfig, which is for the two status writes.
cat >"$ROOT/node.json" <<JSON
{"podResourcesSocket": "$ROOT/node/pod-resources/kubelet.sock", "deviceInfoDir": "$ROOT/devinfo",
 "stateDir": "$ROOT/devplumb", "kubeconfig": "$KUBECONFIG_FILE"}
JSON
cat >"$ROOT/net.d/fast-dra.conf" <<JSON
{"cniVersion": "1.0.0", "name": "fast-dra", "type": "devplumb",
 "resourceName": "example.com/hostdev", "injectDeviceID": ["device"],
 "delegate": {"type": "host-device", "ipam": {"type": "static", "addresses": [{"address": "10.77.1.2/24"}]}}}
JSON
echo "--- cnitool add fast-dra (ifname net1)"
cni add
echo

say "5. what the pod got"
echo "--- interfaces inside the pod's netns:"
ip -n "$NETNS" -br addr show
echo "--- the pod's annotations (k8s.v1.cni.cncf.io/network-status: devplumb's entry):"
k get pods "$POD_NS" "$POD_NAME" metadata.annotations
echo "--- the claim's status.devices (KEP-4817), written by devplumb's field manager:"
k get resourceclaims "$POD_NS" "$CLAIM" status.devices

say "6. DEL, the pod deleted (its claim unprepared and removed)"
cni del
echo "cnitool del fast-dra: ok"
echo "--- the claim's status.devices after DEL:"
k get resourceclaims "$POD_NS" "$CLAIM" status.devices
"$BIN/nodesim" pod del --root "$ROOT/node" --namespace "$POD_NS" --name "$POD_NAME"

say "7. a device-plugin pod spec, unchanged: resources.limits {example.com/hostdev: 2}, two attachments"
# The DeviceClass hostdev.example.com has extendedResourceName example.com/hostdev and no
# device plugin serves the resource here: nodesim, as the 1.37 scheduler, makes the pod a
# claim for two devices and names it in the pod's status.extendedResourceClaimStatus; the
# kubelet reports it under PodResources dynamic_resources. The same devplumb config
# (resourceName) gives net1 and net2 one device each.
POD_NAME=web2
"$BIN/nodesim" pod add --root "$ROOT/node" --namespace "$POD_NS" --name "$POD_NAME" --container "app=example.com/hostdev:2" >/dev/null
POD_UID=$(k get pods "$POD_NS" "$POD_NAME" metadata.uid)
echo "--- the pod's status.extendedResourceClaimStatus, written by the scheduler:"
k get pods "$POD_NS" "$POD_NAME" status.extendedResourceClaimStatus
CLAIM=$(k get pods "$POD_NS" "$POD_NAME" status.extendedResourceClaimStatus.resourceClaimName)
echo "--- claim $CLAIM: its annotations and what the scheduler allocated:"
k get resourceclaims "$POD_NS" "$CLAIM" metadata.annotations
k get resourceclaims "$POD_NS" "$CLAIM" status.allocation.devices.results
for IFNAME in net1 net2; do echo "--- cnitool add fast-dra (ifname $IFNAME)"; cni add >/dev/null; done
echo "--- interfaces inside the pod's netns:"
ip -n "$NETNS" -br link show
echo "--- the claim's status.devices: each device's networkData, written by devplumb:"
k get resourceclaims "$POD_NS" "$CLAIM" status.devices
for IFNAME in net2 net1; do cni del; done
echo "cnitool del fast-dra (net2, net1): ok"
echo "--- the extended-resource claim's status.devices after DEL:"
k get resourceclaims "$POD_NS" "$CLAIM" status.devices
"$BIN/nodesim" pod del --root "$ROOT/node" --namespace "$POD_NS" --name "$POD_NAME"
IFNAME=net1

say "8. the daemons stopped"
DAEMONS=$(cat "$ROOT/pids")
stop_daemons
# A stopped kubelet leaves its registration socket (nodesim too, as the real one does);
# the next kubelet removes it as it starts: the demo does that part.
rm -f "$ROOT/node/device-plugins/kubelet.sock"
ip netns del "$NETNS"

say "9. nothing is left"
nothing_left "$ROOT/node" '^fast-dra-cnitool-'
