package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/node"
)

// metadataLine is the container's print of its metadata file, on one line.
var metadataLine = regexp.MustCompile(`metadata-begin (.*) metadata-end`)

// TestDRADeviceMetadataInTheContainer: netdev-dp in DRA mode, as deployments/dra/ ships
// it, publishes each prepared device's metadata (KEP-5304) on the real node: the kubelet
// passes the metadata CDI device on, containerd bind-mounts the file into the container
// that references the claim, at the path the pod spec alone gives
// (resourceclaimtemplates/<pod claim>/<request>/<driver>-metadata.json), and the
// container reads there the claim, its device and the device's attributes (its device
// ID, resource name, interface name and CDI name) without any environment variable.
// Kubernetes 1.37.2 has no feature gate for it: the API server and the kubelet at their
// defaults do.
func TestDRADeviceMetadataInTheContainer(t *testing.T) {
	draMode(t)
	tmpl := claimTemplate(t, "hostdev-md", draClass)
	path := metadata.ResourceClaimTemplateFilePath(draDriver, "net", "dev")
	pod := createMetadataPod(t, "dra-metadata", tmpl, path)
	waitRunning(t, pod)
	d := allocated(t, pod, draResource)
	var line string
	waitFor(t, "the container's print of "+path, func(context.Context) error {
		m := metadataLine.FindStringSubmatch(podLog(t, pod))
		if m == nil {
			return fmt.Errorf("no metadata line in the container's output:\n%s", podLog(t, pod))
		}
		line = m[1]
		return nil
	})
	var md metadata.DeviceMetadata
	var invalid error
	e2etest.Must(t, devicemetadata.DecodeMetadataFromStream(json.NewDecoder(strings.NewReader(line)), &md,
		devicemetadata.DecodeMetadataWithValidationResult(&invalid)))
	if invalid != nil {
		t.Errorf("the metadata does not validate: %v", invalid)
	}
	if md.Name != d.claim.Name || md.UID != d.claim.UID || md.PodClaimName == nil || *md.PodClaimName != "net" ||
		len(md.Requests) != 1 || md.Requests[0].Name != "dev" || len(md.Requests[0].Devices) != 1 {
		t.Fatalf("metadata %+v: want claim %s (pod claim net), request dev, one device", md, d.claim.Name)
	}
	dev := md.Requests[0].Devices[0]
	if dev.Driver != draDriver || dev.Pool != d.pool || dev.Name != d.name {
		t.Errorf("metadata device %s/%s/%s, want %s/%s/%s", dev.Driver, dev.Pool, dev.Name, draDriver, d.pool, d.name)
	}
	for k, want := range map[resourceapi.QualifiedName]string{
		"k8s.cni.cncf.io/deviceID": d.id, "k8s.cni.cncf.io/resourceName": draResource,
		draDriver + "/interfaceName": d.id, draDriver + "/cdiDevice": d.cdiName(),
	} {
		if a, ok := dev.Attributes[k]; !ok || a.StringValue == nil || *a.StringValue != want {
			t.Errorf("metadata attribute %s = %+v, want %q", k, a, want)
		}
	}
	deletePod(t, pod)
	checkClaimsGone(t, d)
}

// createMetadataPod creates a busybox pod with the pod claim "net" made from template,
// referenced by its container, which prints the file at path on one line and sleeps.
func createMetadataPod(t *testing.T, name, template, path string) *corev1.Pod {
	t.Helper()
	one := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &one,
			Containers: []corev1.Container{{Name: "c", Image: node.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", `echo "metadata-begin $(tr -d '\n' < ` + path + `) metadata-end"; exec sleep 100000`},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "net"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "net", ResourceClaimTemplateName: &template}},
		},
	}
	out, err := nd.Client.CoreV1().Pods("default").Create(ctx(t), pod, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { deletePod(t, out) })
	return out
}
