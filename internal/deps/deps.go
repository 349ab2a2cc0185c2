//go:build deps

// Package deps pins the modules the project builds on, so that `go mod tidy`
// keeps them (and their go.sum lines) while packages are being written.
package deps

import (
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/cni/pkg/invoke"
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/containernetworking/cni/pkg/types/100"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/containernetworking/plugins/pkg/testutils"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	_ "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	_ "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	_ "github.com/vishvananda/netlink"
	_ "google.golang.org/grpc"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	_ "k8s.io/kubelet/pkg/apis/podresources/v1"
	_ "tags.cncf.io/container-device-interface/pkg/cdi"
	_ "tags.cncf.io/container-device-interface/pkg/parser"
	_ "tags.cncf.io/container-device-interface/specs-go"
)
