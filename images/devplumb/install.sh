#!/bin/sh
# devplumb-install: put devplumb into the host's CNI bin dir and keep a kubeconfig for it.
#   install  copy the binary, write the kubeconfig once, exit
#   run      install, then rewrite the kubeconfig whenever the service account token
#            changes (the kubelet rotates projected tokens), forever
# Env: CNI_BIN_DIR (/host/opt/cni/bin), KUBECONFIG_DIR (/host/etc/cni/net.d/devplumb.d),
#      REFRESH_SECONDS (60). Every file is written to a temp name and renamed into place, so
#      a CNI call never sees a half-written binary or kubeconfig.
set -eu
CNI_BIN_DIR=${CNI_BIN_DIR:-/host/opt/cni/bin}
KUBECONFIG_DIR=${KUBECONFIG_DIR:-/host/etc/cni/net.d/devplumb.d}
REFRESH_SECONDS=${REFRESH_SECONDS:-60}
SA=${SA_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}

log() { echo "devplumb-install: $*" >&2; }

install_bin() {
	mkdir -p "$CNI_BIN_DIR"
	cp /usr/local/bin/devplumb "$CNI_BIN_DIR/.devplumb.tmp"
	chmod 0755 "$CNI_BIN_DIR/.devplumb.tmp"
	mv -f "$CNI_BIN_DIR/.devplumb.tmp" "$CNI_BIN_DIR/devplumb"
	log "installed $CNI_BIN_DIR/devplumb"
}

server() {
	host=${KUBERNETES_SERVICE_HOST:?not running in a pod: KUBERNETES_SERVICE_HOST unset}
	port=${KUBERNETES_SERVICE_PORT:-443}
	case "$host" in *:*) host="[$host]" ;; esac
	echo "https://$host:$port"
}

write_kubeconfig() {
	# Plain assignments, so that set -e stops here if one fails (inside the here-document
	# below a failing substitution would be written into the file instead).
	srv=$(server)
	token=$(cat "$SA/token")
	ca=$(base64 -w0 < "$SA/ca.crt")
	mkdir -p "$KUBECONFIG_DIR"
	umask 077
	cat > "$KUBECONFIG_DIR/.devplumb.kubeconfig.tmp" <<KC
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
	mv -f "$KUBECONFIG_DIR/.devplumb.kubeconfig.tmp" "$KUBECONFIG_DIR/devplumb.kubeconfig"
	log "wrote $KUBECONFIG_DIR/devplumb.kubeconfig"
}

case "${1:-run}" in
install)
	install_bin
	write_kubeconfig
	;;
run)
	install_bin
	write_kubeconfig
	last=$(cat "$SA/token")
	while sleep "$REFRESH_SECONDS"; do
		cur=$(cat "$SA/token")
		if [ "$cur" != "$last" ]; then
			write_kubeconfig
			last=$cur
		fi
	done
	;;
*)
	echo "usage: devplumb-install [install|run]" >&2
	exit 2
	;;
esac
