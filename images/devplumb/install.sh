#!/bin/sh
# devplumb-install: put devplumb (the CNI entry point) and devplumb-direct into the host's
# CNI bin dir and keep a kubeconfig for them.
#   install  copy the binaries, write the kubeconfig once, exit
#   run      install, then rewrite the kubeconfig whenever the service account token or
#            CA changes (the kubelet rotates projected tokens), until SIGTERM
# Env: CNI_BIN_DIR (/host/opt/cni/bin), KUBECONFIG_DIR (/host/etc/cni/net.d/devplumb.d),
#      REFRESH_SECONDS (60), SA_DIR (the service account mount), API_SERVER (the API
#      server's URL as the node reaches it; default the "kubernetes" service address),
#      HOST_KUBECONFIG_DIR (/etc/cni/net.d/devplumb.d: KUBECONFIG_DIR's path on the host),
#      and, each only when set, POD_RESOURCES_SOCKET, STATE_DIR, DEVICE_INFO_DIR (host
#      paths for the node config's podResourcesSocket, stateDir, deviceInfoDir).
#      Every file is written to a temp name and renamed into place, so a CNI call never
#      sees a half-written binary, kubeconfig or node config.
# It also writes devplumb's node config, KUBECONFIG_DIR/node.json (mode 0644; package
# pkg/cni/nodeconfig): the settings a NetworkAttachmentDefinition may not carry, first of
# all the kubeconfig's host path.
set -eu
CNI_BIN_DIR=${CNI_BIN_DIR:-/host/opt/cni/bin}
KUBECONFIG_DIR=${KUBECONFIG_DIR:-/host/etc/cni/net.d/devplumb.d}
REFRESH_SECONDS=${REFRESH_SECONDS:-60}
SA=${SA_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
HOST_KUBECONFIG_DIR=${HOST_KUBECONFIG_DIR:-/etc/cni/net.d/devplumb.d}

log() { echo "devplumb-install: $*" >&2; }

# install_bin copies devplumb-direct first: the entry point devplumb execs it beside itself
# when no agent answers, so a node never has an entry point without it.
install_bin() {
	mkdir -p "$CNI_BIN_DIR"
	for b in devplumb-direct devplumb; do
		cp "/usr/local/bin/$b" "$CNI_BIN_DIR/.$b.tmp"
		chmod 0755 "$CNI_BIN_DIR/.$b.tmp"
		mv -f "$CNI_BIN_DIR/.$b.tmp" "$CNI_BIN_DIR/$b"
		log "installed $CNI_BIN_DIR/$b"
	done
}

# member prints the node config's member "$1": "$2" (after a comma and a newline). A
# value is a host path the administrator chose: one that is not absolute, or that JSON
# would need escaped (a quote, a backslash, a control character), is refused rather than
# escaped here.
member() {
	case "$2" in
	*[\"\\]* | *[[:cntrl:]]*) log "$1 \"$2\": a quote, backslash or control character in a path"; return 1 ;;
	/*) ;;
	*) log "$1 \"$2\": not an absolute path"; return 1 ;;
	esac
	printf ',\n  "%s": "%s"' "$1" "$2"
}

# write_node_config writes KUBECONFIG_DIR/node.json: a temp file in the same directory,
# synced, then renamed over the old one, so devplumb reads either the old file or the
# new one whole, also after a power loss. The env settings come only when set: unset,
# devplumb's defaults apply.
write_node_config() {
	body=$(member kubeconfig "$HOST_KUBECONFIG_DIR/devplumb.kubeconfig") || return 1
	for kv in "podResourcesSocket=${POD_RESOURCES_SOCKET:-}" "stateDir=${STATE_DIR:-}" \
		"deviceInfoDir=${DEVICE_INFO_DIR:-}"; do
		[ -n "${kv#*=}" ] || continue
		m=$(member "${kv%%=*}" "${kv#*=}") || return 1
		body="$body$m"
	done
	mkdir -p "$KUBECONFIG_DIR" || return 1
	tmp="$KUBECONFIG_DIR/.node.json.tmp"
	printf '{%s\n}\n' "${body#,}" > "$tmp" || return 1
	chmod 0644 "$tmp" || return 1
	sync "$tmp" || return 1
	mv -f "$tmp" "$KUBECONFIG_DIR/node.json" || return 1
	log "wrote $KUBECONFIG_DIR/node.json"
}

# server is the URL devplumb uses. It runs in the host's network namespace (the runtime
# calls it there), where the "kubernetes" service address works only through kube-proxy
# or its replacement: API_SERVER overrides it for clusters without one.
server() {
	if [ -n "${API_SERVER:-}" ]; then
		echo "$API_SERVER"
		return 0
	fi
	host=${KUBERNETES_SERVICE_HOST:-}
	if [ -z "$host" ]; then
		log "not running in a pod: KUBERNETES_SERVICE_HOST unset"
		return 1
	fi
	port=${KUBERNETES_SERVICE_PORT:-443}
	case "$host" in *:*) host="[$host]" ;; esac
	echo "https://$host:$port"
}

# check_reachable says so when the kubeconfig's server does not answer from here (this
# pod has the host's network, as devplumb does): the kubeconfig is written all the same.
check_reachable() {
	command -v nc >/dev/null 2>&1 || return 0
	hostport=${1#https://}
	hostport=${hostport%%/*}
	host=${hostport%:*}
	port=${hostport##*:}
	[ "$port" != "$hostport" ] || port=443
	host=${host#[}
	host=${host%]}
	if ! nc -w 3 "$host" "$port" -e true </dev/null >/dev/null 2>&1; then
		log "warning: the API server $1 does not answer from the host network; without kube-proxy (or a replacement) the service address does not work there: set API_SERVER in the DaemonSet to an address the node reaches"
	fi
}

# write_kubeconfig checks every step itself (it also runs where set -e does not apply) and
# writes nothing unless it has a server, a non-empty token and the CA.
write_kubeconfig() {
	srv=$(server) || return 1
	token=$(cat "$SA/token") || return 1
	[ -n "$token" ] || { log "$SA/token is empty"; return 1; }
	[ -r "$SA/ca.crt" ] || { log "$SA/ca.crt missing"; return 1; }
	ca=$(base64 < "$SA/ca.crt" | tr -d '\n') # not -w0: busybox and coreutils alike
	[ -n "$ca" ] || { log "$SA/ca.crt is empty"; return 1; }
	mkdir -p "$KUBECONFIG_DIR" || return 1
	tmp="$KUBECONFIG_DIR/.devplumb.kubeconfig.tmp"
	(umask 077 && cat > "$tmp") <<KC || return 1
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $srv
    certificate-authority-data: $ca
users:
- name: devplumb
  user:
    token: $token
contexts:
- name: devplumb
  context: {cluster: local, user: devplumb}
current-context: devplumb
KC
	mv -f "$tmp" "$KUBECONFIG_DIR/devplumb.kubeconfig" || return 1
	log "wrote $KUBECONFIG_DIR/devplumb.kubeconfig (server $srv)"
	check_reachable "$srv"
}

# credentials is what the kubeconfig is made of and may change under us.
credentials() { cat "$SA/token" "$SA/ca.crt"; }

# stop_on_term: as a container's PID 1 the shell gets no default signal action, so it
# traps TERM, before its first write (a TERM right after it would be ignored otherwise).
stop_on_term() {
	sleeper=
	trap 'log "stopping"; [ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null; exit 0' TERM INT
}

# run refreshes until SIGTERM. It sleeps in the background so the trap runs at once
# rather than after the sleep (the kubelet would otherwise wait out the grace period and
# kill). $last must hold the credentials read before the kubeconfig was last written:
# read after it, a rotation in between would look already done and never be written.
run() {
	while :; do
		sleep "$REFRESH_SECONDS" &
		sleeper=$!
		wait "$sleeper" || true
		sleeper=
		# A failed read or write is logged and tried again next round: the kubeconfig
		# written before stays valid until the old token expires.
		cur=$(credentials) || { log "cannot read $SA"; continue; }
		if [ "$cur" != "$last" ]; then
			write_kubeconfig && last=$cur || log "kubeconfig not rewritten; retrying"
		fi
	done
}

case "${1:-run}" in
install)
	write_node_config
	install_bin
	write_kubeconfig
	;;
run)
	stop_on_term
	# The node config first: a call of the new binary finds its settings there.
	write_node_config
	install_bin
	last=$(credentials)
	write_kubeconfig
	run
	;;
*)
	echo "usage: devplumb-install [install|run]" >&2
	exit 2
	;;
esac
