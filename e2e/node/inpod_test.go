package node_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// linksScript is a pod's script that reports, once, what the pod itself sees: each
// network interface of its namespace (the container's /sys is a sysfs of the pod's
// network namespace) with its alias — host-device keeps the moved device's host name
// there — and the vhost-user sockets mounted for it. Then it sleeps.
const linksScript = `for i in /sys/class/net/*; do echo "link ${i##*/} alias=$(cat "$i/ifalias")"; done
for s in /var/run/vswitch/vhu/*; do [ -S "$s" ] && echo "socket $s"; done
echo "links listed"; exec sleep 100000`

var (
	linkLine   = regexp.MustCompile(`(?m) link (\S+) alias=(\S*)$`)
	socketLine = regexp.MustCompile(`(?m) socket (\S+)$`)
)

// inPod is what a pod running linksScript reported.
type inPod struct {
	aliases map[string]string // interface name → alias
	sockets []string
}

// podView waits for the pod's linksScript report and returns it.
func podView(t *testing.T, pod *corev1.Pod) inPod {
	t.Helper()
	var log string
	waitFor(t, "pod "+pod.Name+"'s list of its interfaces", func(context.Context) error {
		log = podLog(t, pod)
		if !strings.Contains(log, "links listed") {
			return fmt.Errorf("not yet in the container's output:\n%s", log)
		}
		return nil
	})
	v := inPod{aliases: map[string]string{}}
	for _, m := range linkLine.FindAllStringSubmatch(log, -1) {
		v.aliases[m[1]] = m[2]
	}
	for _, m := range socketLine.FindAllStringSubmatch(log, -1) {
		v.sockets = append(v.sockets, m[1])
	}
	return v
}

// checkInterface: the pod's interface ifName is the host device dev (host-device's alias).
func checkInterface(t *testing.T, pod *corev1.Pod, v inPod, ifName, dev string) {
	t.Helper()
	alias, ok := v.aliases[ifName]
	switch {
	case !ok:
		t.Errorf("pod %s has no interface %s (it has %v); PodResources lists %s for it", pod.Name, ifName, v.aliases, dev)
	case alias != dev:
		t.Errorf("pod %s's %s is host device %q, PodResources lists %s for it", pod.Name, ifName, alias, dev)
	}
}
