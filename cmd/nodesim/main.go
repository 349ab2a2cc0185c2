// Command nodesim is a single-node kubelet emulator for demos, tests and
// device plugin authors: device plugin Registration, kubelet-like allocation
// and the PodResources v1 API, on real gRPC unix sockets under a root directory.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/devplumb/devplumb/pkg/base/version"
)

const usage = `nodesim: a one-node kubelet emulator speaking the kubelet's real gRPC APIs.

Usage:
  nodesim serve --root DIR [--log-level debug|info|warn|error] [--log-format text|json]
                [--podresources-get enabled|disabled|unimplemented]
                [--podresources-qps N] [--podresources-burst N] [--plugin-grace-period 5m]
                [--kubeconfig FILE --node-name NODE]
      Serve until SIGINT/SIGTERM:
        DIR/device-plugins/kubelet.sock   device plugin Registration (deviceplugin v1beta1)
        DIR/pod-resources/kubelet.sock    PodResources v1 (List, Get, GetAllocatableResources),
                                          with the kubelet's rate limit (100 QPS, burst 10)
        DIR/nodesim/control.sock          control API used by the commands below
                                          (HTTP+JSON on a unix socket: POST /v1/pods,
                                          DELETE /v1/pods/NS/NAME, GET /v1/pods, GET /v1/resources)
        DIR/nodesim/checkpoint.json       assignments, kept across restarts
      kubelet.sock is created last: once it exists, the node is ready.
      A plugin whose ListAndWatch stream breaks has its devices marked unhealthy; unless it
      registers again within --plugin-grace-period (the kubelet's 5m), they are dropped.
      Starting again on the same DIR is a kubelet restart: assignments survive, every socket
      in DIR/device-plugins is removed and kubelet.sock recreated, so plugins register again.
      With --kubeconfig (and --node-name) the node also speaks DRA against that API server:
        DIR/plugins_registry/             DRA kubelet plugins register here (pluginregistration v1,
                                          DRA gRPC v1 or v1beta1); kept across restarts, so drivers
                                          are registered again from their sockets
        DIR/plugins/                      for the drivers' DRA sockets (DIR/plugins/DRIVER/dra.sock)
      it creates the Node object NODE if absent (drivers publish ResourceSlices owned by it),
      deletes a driver's ResourceSlices of NODE 30 s after it deregistered (its registration
      socket gone) unless it registered again, as the kubelet does,
      and pods with --claim are admitted as control plane and kubelet would (see pod add).

  nodesim pod add --root DIR --namespace NS --name NAME [--uid UID] \
          --container NAME=RES:COUNT[,RES:COUNT]...[,claim:PODCLAIM[/REQUEST]]...[,init|,sidecar] [--container ...] \
          [--claim PODCLAIM=claim:NAME | --claim PODCLAIM=template:NAME ...]
      Admit a pod like the kubelet (healthy free devices, GetPreferredAllocation when offered,
      Allocate per container and resource, PreStartContainer when required). Prints JSON: per
      container the device IDs and the plugin's whole AllocateResponse.
      --claim (needs serve --kubeconfig) adds a pod-spec resource claim: an existing ResourceClaim
      or one made from a ResourceClaimTemplate; claim:PODCLAIM in --container makes the container
      reference it (resources.claims). A claim no container references is prepared but, as on
      the real kubelet, not reported by PodResources. nodesim then does what the control plane
      does: the Pod object (created on this node if absent; if it exists it must agree, and its
      UID is used), claims from templates (named <pod>-<podclaim>-xxxxx, owned by the pod, pod
      status.resourceClaimStatuses), allocation with the scheduler's allocator unless the claim
      is allocated already, reservedFor; then NodePrepareResources per driver, and PodResources
      reports the claims in dynamic_resources (claim, driver, pool, device, CDI devices; as
      kubelets 1.34-1.37 do, a claim's second device of a driver lists the first's CDI devices
      before its own). claim:PODCLAIM/REQUEST references one request of a claim: PodResources
      still reports the whole claim for the container, as the kubelet does.
      A RES no registered device plugin has a healthy device of, that a DeviceClass serves as an
      extended resource (spec.extendedResourceName, or deviceclass.resource.kubernetes.io/CLASS),
      is DRA's, as the 1.37 scheduler decides: one claim for all of the pod's such requests
      (<pod>-extended-resources-xxxxx, annotation resource.kubernetes.io/extended-resource-claim,
      owned by the pod, requests container-I-request-J), allocated with the pod's other claims,
      the pod's status.extendedResourceClaimStatus mapping each container's resource to its
      requests; PodResources reports that claim for the containers it maps, under
      dynamic_resources, not under devices. ,init makes an init container (its extended
      resources are DRA's, reusing later containers' requests as the scheduler does; it gets no
      device plugin devices), ,sidecar one that keeps running: PodResources reports sidecars
      before the containers and no other init container.
      On any error nothing stays: claims made are deleted, reservations and allocations undone.

  nodesim pod del --root DIR --namespace NS --name NAME
      Free a pod's devices (exit 1 if the pod does not exist). A pod with claims has them
      unprepared (unless another pod on the node holds them), its reservations removed (a claim
      no one reserves is deallocated), its generated claims and the Pod object deleted; if that
      fails (e.g. a driver that does not register again) the pod stays and del can be repeated.

  nodesim pods --root DIR
      Print the pods and their devices as JSON.

  nodesim wait --root DIR (--resource RES | --driver DRIVER) [--timeout 30s]
      Wait until a device plugin for RES has registered and advertised its devices, or the DRA
      driver has registered (exit 1 when the timeout passes first). A nodesim serve that is
      still starting is waited for within the same timeout.

  nodesim drivers --root DIR
      Print the registered DRA drivers (name, endpoint, gRPC service) as JSON.

  nodesim resources --root DIR
      Print what plugins advertise (health, NUMA nodes) as JSON.

  nodesim version | --version
  nodesim COMMAND --help

pod/pods/wait/drivers/resources talk to a running "nodesim serve --root DIR".
`

// podUsage is the help of "nodesim pod": its two subcommands.
const podUsage = `usage: nodesim pod add|del --root DIR --namespace NS --name NAME [flags]
  nodesim pod add --help and nodesim pod del --help list each one's flags.
`

// errUsage marks command line mistakes (exit 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stdout, os.Stderr))
}

func exitCode(err error, stdout, stderr io.Writer) int {
	var help *helpRequested
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.text)
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "nodesim: %v\n\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "nodesim: %v\n", err)
		return 1
	}
}

// run executes one command line; serve returns when ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command given", errUsage)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "pod":
		if len(args) < 2 {
			return fmt.Errorf("%w: pod needs a subcommand: add or del", errUsage)
		}
		switch args[1] {
		case "-h", "-help", "--help", "help":
			return &helpRequested{podUsage}
		case "add":
			return podAdd(ctx, args[2:], stdout)
		case "del":
			return podDel(ctx, args[2:])
		}
		return fmt.Errorf("%w: unknown pod subcommand %q (want add or del)", errUsage, args[1])
	case "pods":
		return listPods(ctx, args[1:], stdout)
	case "resources":
		return listResources(ctx, args[1:], stdout)
	case "wait":
		return wait(ctx, args[1:])
	case "drivers":
		return listDrivers(ctx, args[1:], stdout)
	case "help", "-h", "--help":
		_, err := io.WriteString(stdout, usage)
		return err
	case "version", "--version":
		_, err := fmt.Fprintln(stdout, version.Line("nodesim"))
		return err
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}
