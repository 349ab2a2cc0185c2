package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// drainBound is how long the kubelet may take to stop every pod at Close.
const drainBound = 2 * time.Minute

// Close stops the node and restores the host: pods are deleted through the API server
// (the kubelet stops them, runs CNI DEL and removes their network namespaces), then the
// daemons stop, what is left in the kubelet's cgroups is killed and the cgroups removed,
// the mount namespace ends with its last process, the links go and the sysctls come back.
func (n *Node) Close() error {
	var errs []error
	if n.API != nil && n.kubelet != nil {
		if err := n.drain(); err != nil {
			errs = append(errs, err)
		}
	}
	n.StopKubelet()
	for _, p := range []**kubeapi.Proc{&n.scheduler, &n.controllerManager} {
		if *p != nil {
			(*p).Kill()
			*p = nil
		}
	}
	if err := killCgroups(); err != nil {
		errs = append(errs, err)
	}
	if n.ns != nil {
		n.ns.close()
		n.containerd = nil
	}
	if n.API != nil {
		n.API.Close()
	}
	if err := n.host.restore(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// drain deletes every DaemonSet and pod and waits until the kubelet has removed them.
func (n *Node) drain() error {
	ctx, cancel := context.WithTimeout(context.Background(), drainBound)
	defer cancel()
	all := metav1.ListOptions{}
	one := int64(1)
	dss, err := n.Client.AppsV1().DaemonSets("").List(ctx, all)
	if err != nil {
		return fmt.Errorf("node: drain: %w", err)
	}
	for _, ds := range dss.Items {
		err := n.Client.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("node: drain: %w", err)
		}
	}
	pods, err := n.Client.CoreV1().Pods("").List(ctx, all)
	if err != nil {
		return fmt.Errorf("node: drain: %w", err)
	}
	for _, p := range pods.Items {
		err := n.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &one})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("node: drain: %w", err)
		}
	}
	return n.waitFor("drain", drainBound, func() error {
		pods, err := n.Client.CoreV1().Pods("").List(ctx, all)
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left, e.g. %s/%s", len(pods.Items), pods.Items[0].Namespace, pods.Items[0].Name)
		}
		return nil
	})
}
