package kube

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// foreign is an entry another writer made, with keys this NAD client version does not
// know and without "dns": it must come back exactly as it was.
const foreign = `{"name":"cluster-default","interface":"eth0","ips":["192.0.2.2"],"default":true,` +
	`"x-vendor":{"queue":7},"device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:00.1","x-new":"kept"}}}`

func TestUpsertKeepsOthersAndReplacesOwn(t *testing.T) {
	odd := json.RawMessage(`"not an object"`)
	list := statusList{json.RawMessage(foreign), odd}
	mine := nadv1.NetworkStatus{Name: "ns/a", Interface: "net1", Mac: "02:00:00:00:00:01"}
	list, changed, err := upsert(list, mine)
	if err != nil || !changed || len(list) != 3 || string(list[0]) != foreign || string(list[1]) != string(odd) {
		t.Fatalf("append: %s changed=%v err=%v", list, changed, err)
	}
	if _, changed, _ = upsert(list, mine); changed {
		t.Fatal("identical entry reported as a change")
	}
	mine.Mac = "02:00:00:00:00:02"
	list, changed, _ = upsert(list, mine)
	if !changed || len(list) != 3 || !strings.Contains(string(list[2]), mine.Mac) || string(list[0]) != foreign {
		t.Fatalf("replace: %s changed=%v", list, changed)
	}
	list, changed = remove(list, "ns/a", "net1")
	if !changed || len(list) != 2 || string(list[0]) != foreign {
		t.Fatalf("remove: %s changed=%v", list, changed)
	}
	if _, changed = remove(list, "ns/a", "net1"); changed {
		t.Fatal("removing a missing entry reported as a change")
	}
}

// Two entries of ours (a crash between two writers of old) collapse into one.
func TestUpsertDropsDuplicatesOfOwnEntry(t *testing.T) {
	mine := nadv1.NetworkStatus{Name: "ns/a", Interface: "net1"}
	b, _ := json.Marshal(mine)
	list, changed, err := upsert(statusList{b, json.RawMessage(foreign), b}, mine)
	if err != nil || !changed || len(list) != 2 || string(list[1]) != foreign {
		t.Fatalf("got %s changed=%v err=%v", list, changed, err)
	}
}

// The patch built from a read list carries the foreign entry with the same meaning.
func TestStatusPatchKeepsForeignEntries(t *testing.T) {
	pod := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1", UID: "u",
		Annotations: map[string]string{nadv1.NetworkStatusAnnot: "[" + foreign + "]"}}}
	list, err := parseStatus(pod)
	if err != nil {
		t.Fatal(err)
	}
	list, _, err = upsert(list, nadv1.NetworkStatus{Name: "ns/a", Interface: "net1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := statusPatch(pod, list)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	var written []json.RawMessage
	if err := json.Unmarshal([]byte(p.Metadata.Annotations[nadv1.NetworkStatusAnnot]), &written); err != nil {
		t.Fatal(err)
	}
	if len(written) != 2 || !sameJSON(written[0], json.RawMessage(foreign)) {
		t.Fatalf("foreign entry changed in meaning:\n%s\nwant\n%s", written[0], foreign)
	}
}

func TestStatusPatchCarriesPreconditions(t *testing.T) {
	pod := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "42", UID: "u-1"}}
	b, err := statusPatch(pod, statusList{json.RawMessage(`{"name":"n","interface":"net1"}`)})
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
	pod := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		Annotations: map[string]string{nadv1.NetworkStatusAnnot: `{"name":"x"}`}}}
	_, err := parseStatus(pod)
	if !errors.Is(err, ErrBadAnnotation) || !strings.Contains(err.Error(), "ns/p") {
		t.Fatalf("got %v", err)
	}
}

func TestNewRejectsBadKubeconfig(t *testing.T) {
	if _, err := New("", time.Second, nil); err == nil {
		t.Fatal("empty path accepted")
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if _, err := New(p, time.Second, nil); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(p, []byte("clusters: [[["), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(p, time.Second, nil); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("garbage file: %v", err)
	}
}
