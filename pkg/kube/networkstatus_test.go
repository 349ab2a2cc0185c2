package kube

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUpsertKeepsOthersAndReplacesOwn(t *testing.T) {
	other := nadv1.NetworkStatus{Name: "default", Interface: "eth0"}
	mine := nadv1.NetworkStatus{Name: "ns/a", Interface: "net1", Mac: "02:00:00:00:00:01"}
	list, changed := upsert([]nadv1.NetworkStatus{other}, mine)
	if !changed || len(list) != 2 || list[0].Name != "default" || list[1].Mac != mine.Mac {
		t.Fatalf("append: %+v changed=%v", list, changed)
	}
	if _, changed = upsert(list, mine); changed {
		t.Fatal("identical entry reported as a change")
	}
	mine.Mac = "02:00:00:00:00:02"
	list, changed = upsert(list, mine)
	if !changed || len(list) != 2 || list[1].Mac != mine.Mac {
		t.Fatalf("replace: %+v changed=%v", list, changed)
	}
	list, changed = remove(list, "ns/a", "net1")
	if !changed || len(list) != 1 || list[0].Name != "default" {
		t.Fatalf("remove: %+v changed=%v", list, changed)
	}
	if _, changed = remove(list, "ns/a", "net1"); changed {
		t.Fatal("removing a missing entry reported as a change")
	}
}

func TestStatusPatchCarriesPreconditions(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "42", UID: "u-1"}}
	b, err := statusPatch(pod, []nadv1.NetworkStatus{{Name: "n", Interface: "net1"}})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Metadata struct {
			ResourceVersion string             `json:"resourceVersion"`
			UID             string             `json:"uid"`
			Annotations     map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	m := p.Metadata
	if m.ResourceVersion != "42" || m.UID != "u-1" || m.Annotations[nadv1.NetworkStatusAnnot] == nil {
		t.Fatalf("patch %s", b)
	}
	b, err = statusPatch(pod, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"k8s.v1.cni.cncf.io/network-status":null`) {
		t.Fatalf("empty list must delete the annotation: %s", b)
	}
}

func TestParseStatusRejectsGarbage(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		Annotations: map[string]string{nadv1.NetworkStatusAnnot: `{"name":"x"}`}}}
	_, err := parseStatus(pod)
	if !errors.Is(err, ErrBadAnnotation) || !strings.Contains(err.Error(), "ns/p") {
		t.Fatalf("got %v", err)
	}
}

func TestNewRejectsBadKubeconfig(t *testing.T) {
	if _, err := New("", 0); err == nil {
		t.Fatal("empty path accepted")
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if _, err := New(p, 0); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(p, []byte("clusters: [[["), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(p, 0); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("garbage file: %v", err)
	}
}
