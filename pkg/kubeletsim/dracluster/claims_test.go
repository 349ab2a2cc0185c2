package dracluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGenerateNameAsTheController(t *testing.T) {
	if got := generateName("web", "net"); got != "web-net-" {
		t.Errorf("generateName = %q", got)
	}
	// Too long: both parts cut in proportion, no trailing hyphen (the API
	// server appends 5 random characters).
	pod, claim := strings.Repeat("p", 60), strings.Repeat("c", 20)
	got := generateName(pod, claim)
	if len(got) > 57 || !strings.HasPrefix(got, strings.Repeat("p", 41)+"-c") || strings.HasSuffix(got, "-") {
		t.Errorf("generateName of long names = %q (%d)", got, len(got))
	}
}

func TestClaimFromTemplate(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u1"}}
	tmpl := &resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}, Labels: map[string]string{"l": "v"}},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "net"}}}}}}
	c := claimFromTemplate(pod, "net", tmpl)
	if c.GenerateName != "web-net-" || c.Annotations[PodClaimAnnotation] != "net" || c.Annotations["a"] != "b" ||
		c.Labels["l"] != "v" || len(c.Spec.Devices.Requests) != 1 {
		t.Errorf("claim %+v", c)
	}
	if o := c.OwnerReferences; len(o) != 1 || o[0].UID != "u1" || o[0].Kind != "Pod" || !*o[0].Controller || !*o[0].BlockOwnerDeletion {
		t.Errorf("owners %+v", o)
	}
	if _, ok := tmpl.Spec.ObjectMeta.Annotations[PodClaimAnnotation]; ok {
		t.Error("the template's annotations were changed")
	}
}
