#!/usr/bin/env bash
# make demo: the whole device-to-network path on this machine, as root, with no cluster.
#
# nodesim plays the kubelet, netdev-dp advertises a pool of veth ends and a pool of
# vhost-user sockets, a pod gets two veths and one socket, and cnitool runs devplumb
# three times into the pod's network namespace. Everything is torn down at the end,
# on Ctrl-C, and when a step fails; the last step shows that nothing is left.
#
# Needs: bin/ (make build) and bin/cni/ (make cni-plugins), or DEMO_BIN with both;
# root; iproute2; flock (util-linux).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DEMO_BIN:-$REPO/bin}
CNI_BIN=$BIN/cni
NETNS=devplumb-demo
POD_NS=demo POD_NAME=web POD_UID=0d3c6a51-4f1a-4e57-9d0b-6f1f6d9f7a10
SANDBOX=4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b
VETHS=(dpdemo0 dpdemo1 dpdemo2)   # the pool; each has a peer <name>p on the host
ROOT=""
PIDS=()
DEMO=demo
STEP="checking prerequisites"
# shellcheck source=scripts/demo-lib.sh
. "$REPO/scripts/demo-lib.sh"

[ "$(id -u)" = 0 ] || fail "run as root: it creates network namespaces and veth pairs"
for b in devplumb devplumb-direct netdev-dp nodesim devplumbctl vswitch; do [ -x "$BIN/$b" ] || fail "$BIN/$b missing: run make demo (it builds them)"; done
for b in cnitool host-device macvlan static; do [ -x "$CNI_BIN/$b" ] || fail "$CNI_BIN/$b missing: run make demo (it builds them)"; done
# Run directly (not by make demo), bin/ may predate the sources: say so.
newer=$(cd "$REPO" && find cmd pkg devinfo podresources scripts/vswitch -name '*.go' -newer "$BIN/devplumb" 2>/dev/null | head -1)
[ -z "$newer" ] || echo "demo: note: $newer is newer than $BIN/devplumb: make demo rebuilds bin/ first" >&2
one_at_a_time

# stop_daemons: SIGTERM, then SIGKILL what has not exited within 5 s, last started first:
# netdev-dp asks nodesim (its kubelet) as it stops which devices pods still hold, so
# nodesim must outlive it.
stop_daemons() {
	local pid i
	for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
		pid=${PIDS[$i]}
		kill -TERM "$pid" 2>/dev/null || continue
		for _ in $(seq 50); do running "$pid" || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}

# running PID: the daemon has not exited yet (an exited one is a zombie until waited for).
running() {
	local state
	state=$(sed -n 's/^[0-9]* (.*) \(.\) .*/\1/p' "/proc/$1/stat" 2>/dev/null || true)
	[ -n "$state" ] && [ "$state" != Z ]
}

cleanup() {
	local rc=$?
	trap - EXIT
	trap '' INT TERM # a second Ctrl-C must not cut the clean-up short
	set +e
	if [ "$rc" != 0 ]; then
		echo "demo: stopped during step \"$STEP\" (exit $rc); cleaning up" >&2
		[ "$rc" -ge 128 ] || show_logs
	fi
	if [ -n "$ROOT" ] && [ -d "$ROOT/net.d" ] && ip netns list | grep -qw "$NETNS"; then
		for net in vhost-net fast-b fast-a; do cni del "$net" "net-$net" >/dev/null 2>&1; done
	fi
	stop_daemons
	remove_node "$ROOT"
	exit "$rc"
}

# remove_node ROOT: the netns, links and files of a demo run.
remove_node() {
	local v net
	ip netns del "$NETNS" 2>/dev/null || true
	for v in "${VETHS[@]}" dpdemomv; do ip link del "$v" 2>/dev/null || true; done
	# cnitool's result cache, left when a DEL could not run.
	for net in fast-a fast-b vhost-net; do rm -f /var/lib/cni/results/"$net"-cnitool-*-net-"$net"; done
	[ -z "$1" ] || rm -rf "$1"
}

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

forget_killed_runs "/tmp/devplumb-demo.*"
ROOT=$(mktemp -d /tmp/devplumb-demo.XXXXXX)
mkdir -p "$ROOT/net.d" "$ROOT/vhost" "$ROOT/cdi" "$ROOT/logs"

# devplumb's node config (the node's paths: a network config may not name them), as
# the DaemonSet's install container writes /etc/cni/net.d/devplumb.d/node.json.
cat >"$ROOT/node.json" <<JSON
{"podResourcesSocket": "$ROOT/pod-resources/kubelet.sock",
 "deviceInfoDir": "$ROOT/devinfo", "stateDir": "$ROOT/devplumb"}
JSON

# cnitool with the pod's identity, as a container runtime would call it; the runtime's
# environment names devplumb's node config.
cni() { # cni add|del NETWORK IFNAME
	DEVPLUMB_NODE_CONFIG="$ROOT/node.json" CNI_PATH="$BIN:$CNI_BIN" NETCONFPATH="$ROOT/net.d" CNI_IFNAME="$3" \
	CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=$POD_NS;K8S_POD_NAME=$POD_NAME;K8S_POD_UID=$POD_UID;K8S_POD_INFRA_CONTAINER_ID=$SANDBOX" \
		"$CNI_BIN/cnitool" "$1" "$2" "/var/run/netns/$NETNS"
}

say "1. the node: veth ends, vhost-user sockets, nodesim (the kubelet), netdev-dp (the device plugin)"
for v in "${VETHS[@]}"; do ip link add "$v" type veth peer name "${v}p"; ip link set "${v}p" up; done
ip link add dpdemomv type veth peer name dpdemomvp   # master of the vhost network's macvlan
ip link set dpdemomv up; ip link set dpdemomvp up
echo "veth pool: ${VETHS[*]}"
start vswitch "$BIN/vswitch" "$ROOT/vhost/port0.sock" "$ROOT/vhost/port1.sock" "$ROOT/vhost/port2.sock"
wait_for 5 "vhost-user sockets" test -S "$ROOT/vhost/port2.sock"
echo "vhost-user sockets: $(cd "$ROOT/vhost" && echo *)"

start nodesim "$BIN/nodesim" serve --root "$ROOT"
wait_for 10 "nodesim" test -S "$ROOT/device-plugins/kubelet.sock"
cat >"$ROOT/netdev-dp.json" <<JSON
{"resources": [
  {"resourceName": "example.com/veth", "netdevs": {"names": ["dpdemo[0-9]"]}},
  {"resourceName": "example.com/vhost", "vhostUser": {"socketDir": "$ROOT/vhost", "mode": "client"}}
]}
JSON
start netdev-dp "$BIN/netdev-dp" --config "$ROOT/netdev-dp.json" --plugin-dir "$ROOT/device-plugins" \
	--devinfo-dir "$ROOT/devinfo" --cdi-dir "$ROOT/cdi" --pod-resources-socket "$ROOT/pod-resources/kubelet.sock"

say "2. a pod asks for two veths and one vhost-user socket (nodesim pod add, as the kubelet admits it)"
for res in example.com/veth example.com/vhost; do
	"$BIN/nodesim" wait --root "$ROOT" --resource "$res" --timeout 15s >/dev/null ||
		fail "netdev-dp did not register $res"
done
echo "--- devices the kubelet (nodesim) has from netdev-dp:"
"$BIN/nodesim" resources --root "$ROOT"
echo "--- the pod's allocation (device IDs, and netdev-dp's AllocateResponse with CDI devices):"
"$BIN/nodesim" pod add --root "$ROOT" --namespace "$POD_NS" --name "$POD_NAME" --uid "$POD_UID" \
	--container app=example.com/veth:2,example.com/vhost:1

say "3. the pod's network namespace, and devplumb through cnitool three times"
ip netns add "$NETNS"
netconf() { # netconf NAME RESOURCE INJECT-KEYS DELEGATE-JSON
	cat >"$ROOT/net.d/$1.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "$1", "plugins": [{
  "type": "devplumb", "resourceName": "$2", "injectDeviceID": $3,
  "delegate": $4}]}
JSON
}
# host-device takes a netdev by name in "device": devplumb injects the device ID there.
netconf fast-a example.com/veth '["device"]' '{"type": "host-device", "ipam": {"type": "static", "addresses": [{"address": "10.77.1.2/24"}]}}'
netconf fast-b example.com/veth '["device"]' '{"type": "host-device", "ipam": {"type": "static", "addresses": [{"address": "10.77.2.2/24"}]}}'
# The socket is the device here; macvlan stands in for a userspace CNI plugin, and
# the vhost-user device-info still flows to the CNI file and the network-status entry.
netconf vhost-net example.com/vhost '["deviceID"]' '{"type": "macvlan", "master": "dpdemomv", "mode": "bridge", "ipam": {"type": "static", "addresses": [{"address": "10.77.3.2/24"}]}}'
for net in fast-a fast-b vhost-net; do
	echo "--- cnitool add $net (ifname net-$net)"
	cni add "$net" "net-$net"
	echo
done

say "4. what the pod got"
echo "--- devices (kubelet PodResources), devplumb's attachments, device-info files, network-status:"
"$BIN/devplumbctl" inspect --root "$ROOT"
echo "--- interfaces inside the pod's netns:"
ip -n "$NETNS" -br addr show
for net in fast-a fast-b vhost-net; do
	f=$(ls "$ROOT"/devinfo/cni/"$net"-*_net-"$net" 2>/dev/null || true)
	if [ -n "$f" ]; then
		echo "--- attachment $net: CNI device-info file $(basename "$f"):"; cat "$f"; echo
	else
		echo "--- attachment $net: no device-info file (netdev-dp describes no plain netdev: the spec has no type for one)"
	fi
done
for f in "$ROOT"/cdi/*; do echo "--- CDI spec $(basename "$f"):"; cat "$f"; echo; done

say "5. DEL all three, stop the daemons"
for net in vhost-net fast-b fast-a; do cni del "$net" "net-$net"; echo "cnitool del $net: ok"; done
"$BIN/nodesim" pod del --root "$ROOT" --namespace "$POD_NS" --name "$POD_NAME"
DAEMONS=$(cat "$ROOT/pids")
stop_daemons
# A stopped kubelet leaves its registration socket (nodesim too, as the real one does);
# the next kubelet removes it as it starts: the demo does that part.
rm -f "$ROOT/device-plugins/kubelet.sock"
ip netns del "$NETNS"

say "6. nothing is left"
nothing_left "$ROOT" '^(fast-a|fast-b|vhost-net)-cnitool-'
