package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/devplumb/devplumb/pkg/cni/plugin/plugintest"
	"github.com/devplumb/devplumb/podresources"
)

// splitEnv is a node whose pod p1 holds veth ends as devices of example.com/vf,
// attached by the real host-device plugin (which moves the device into the pod's
// real netns) with static IPAM, and devplumb in-process with a stand-in API server.
type splitEnv struct {
	*plugintest.Node
	t    *testing.T
	p    *Plugin
	kube *fakeKube
	conf map[string]any
}

func newSplitEnv(t *testing.T, devices int) *splitEnv {
	e := &splitEnv{Node: plugintest.NewNode(t, devices), t: t, kube: &fakeKube{}}
	e.p = e.plugin()
	e.conf = e.Conf(map[string]any{"type": "host-device",
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]string{"address": "192.0.2.10/24"}}}})
	e.conf["kubeconfig"], e.conf["events"] = "/etc/cni/kc", "all"
	return e
}

// plugin is a devplumb as one process runs it: the agent, or devplumb-direct.
func (e *splitEnv) plugin() *Plugin {
	return &Plugin{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: 5 * time.Second,
		NewKube: func(string, time.Duration, *slog.Logger) (Kube, error) { return e.kube, nil }}
}

func (e *splitEnv) args(ifName string) *skel.CmdArgs {
	return podCall(e.t, e.conf, e.Pod.Path(), ifName, e.CNIPath)
}

// run is the entry point's part: the prepared delegates' ADD or DEL through
// libcni, in this process, outside any devplumb call.
func (e *splitEnv) run(d *Delegate, add bool) (types.Result, error) {
	e.t.Helper()
	list, rt, err := d.Conf()
	if err != nil {
		e.t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(e.CNIPath), d.CacheDir, nil)
	if add {
		return cni.AddNetworkList(context.Background(), list, rt)
	}
	return nil, cni.DelNetworkList(context.Background(), list, rt)
}

// viaJSON is what an agent keeping v between the two steps may do: encode it
// and decode it again.
func viaJSON[T any](t *testing.T, v *T) *T {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// An ADD prepared, run by another party, encoded and decoded (as an agent may keep
// it), resumed by another devplumb and committed gives what Add gives: the same
// result, record, CNI device-info file, network-status entry and Event; a DEL in
// two steps likewise undoes it all.
func TestPrepareRunCommitIsAdd(t *testing.T) {
	e := newSplitEnv(t, 1)
	whole, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) })
	if err != nil {
		t.Fatal(err)
	}
	wantRec, wantFile := e.View()
	if err := e.p.Del(e.args("net1")); err != nil {
		t.Fatal(err)
	}
	if !e.OnHost(e.Devs[0]) || len(e.Records()) != 0 {
		t.Fatalf("after DEL: device on host %v, records %+v", e.OnHost(e.Devs[0]), e.Records())
	}

	prep, err := e.p.PrepareAdd(e.args("net1"))
	if err != nil {
		t.Fatal(err)
	}
	if prep.Delegate == nil || prep.DeviceID != e.Devs[0] || !strings.Contains(string(prep.Delegate.ConfList), e.Devs[0]) {
		t.Fatalf("prepared %+v: want the delegate run with device %s injected", prep, e.Devs[0])
	}
	if recs := e.Records(); len(recs) != 1 || recs[0].Complete || len(recs[0].Delegate) == 0 {
		t.Fatalf("records after prepare %+v, want one in progress naming its delegates", recs)
	}
	prep.Close() // this process is done with it: another commits
	kept := viaJSON(t, prep)
	result, derr := e.run(kept.Delegate, true)
	if derr != nil {
		t.Fatal(derr)
	}
	if err := e.plugin().ResumeAdd(kept); err != nil {
		t.Fatal(err)
	}
	out, err := kept.CommitAdd(result, nil)
	if err != nil {
		t.Fatal(err)
	}
	split, err := captureStdout(t, func() error { return types.PrintResult(out, "1.0.0") })
	if err != nil {
		t.Fatal(err)
	}
	if split != whole || !strings.Contains(split, "192.0.2.10/24") {
		t.Errorf("result of the two steps %s, of Add %s", split, whole)
	}
	// What the agent answers, made from the record, prints the same.
	if printed, err := kept.Printed(); err != nil || string(printed) != whole {
		t.Errorf("Printed: %s, %v; Add printed %s", printed, err, whole)
	}
	gotRec, gotFile := e.View()
	if !reflect.DeepEqual(gotRec, wantRec) || gotFile != wantFile {
		t.Errorf("record and CNI file of the two steps:\n%+v\n%s\nof Add:\n%+v\n%s", gotRec, gotFile, wantRec, wantFile)
	}
	e.checkAPIWrites()
	e.delInTwoSteps()
}

// checkAPIWrites: Add and the two steps wrote one and the same network-status
// entry and Event each.
func (e *splitEnv) checkAPIWrites() {
	e.t.Helper()
	events, _ := e.kube.recorded()
	e.kube.mu.Lock()
	set := append([]any(nil), e.kube.set[0], e.kube.set[len(e.kube.set)-1])
	n := len(e.kube.set)
	e.kube.mu.Unlock()
	if n != 2 || !reflect.DeepEqual(set[0], set[1]) {
		e.t.Errorf("network-status entries written %d, first %+v, last %+v: want two alike", n, set[0], set[1])
	}
	if len(events) != 2 || events[0] != events[1] || !strings.Contains(events[1].Note, "192.0.2.10") {
		e.t.Errorf("events %+v: want two alike AddedInterface", events)
	}
}

// delInTwoSteps runs DEL as the agent would: prepare, the delegates' DEL elsewhere, commit.
func (e *splitEnv) delInTwoSteps() {
	e.t.Helper()
	prep, err := e.p.PrepareDel(e.args("net1"))
	if err != nil || prep == nil || prep.Delegate == nil || prep.Record == nil {
		e.t.Fatalf("PrepareDel: %+v, %v: want the delegates' DEL from the record", prep, err)
	}
	prep.Close()
	kept := viaJSON(e.t, prep)
	if _, err := e.run(kept.Delegate, false); err != nil {
		e.t.Fatal(err)
	}
	if err := e.plugin().ResumeDel(kept); err != nil {
		e.t.Fatal(err)
	}
	if err := kept.CommitDel(nil); err != nil {
		e.t.Fatal(err)
	}
	if !e.OnHost(e.Devs[0]) || e.InPod("net1") || len(e.Records()) != 0 {
		e.t.Errorf("after DEL in two steps: device on host %v, in pod %v, records %+v", e.OnHost(e.Devs[0]), e.InPod("net1"), e.Records())
	}
	if _, err := os.Stat(filepath.Join(e.Root, "devinfo", "cni", "fast-net-c1_net1")); !errors.Is(err, os.ErrNotExist) {
		e.t.Errorf("CNI device-info file after DEL: %v", err)
	}
	e.kube.mu.Lock()
	defer e.kube.mu.Unlock()
	if len(e.kube.removed) != 2 {
		e.t.Errorf("network-status removals %v: want one per DEL", e.kube.removed)
	}
}

// A prepared ADD whose commit never comes (the agent or entry point died after the
// delegates ran) is undone by the next ADD of the attachment, which then attaches
// the device afresh; and by DEL, which frees the device.
func TestPreparedAddNeverCommitted(t *testing.T) {
	e := newSplitEnv(t, 2)
	for _, ifName := range []string{"net1", "net2"} {
		prep, err := e.p.PrepareAdd(e.args(ifName))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.run(prep.Delegate, true); err != nil {
			t.Fatal(err)
		}
		prep.Close()
	}
	if !e.InPod("net1") || !e.InPod("net2") {
		t.Fatal("the delegates' ADD did not move the devices into the pod")
	}
	// host-device's ADD of a device already in the pod fails: this passes only
	// because the earlier delegates are undone first.
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatalf("ADD after a prepared ADD never committed: %v", err)
	}
	if !e.InPod("net1") {
		t.Error("net1 not in the pod after the new ADD")
	}
	if err := e.p.Del(e.args("net2")); err != nil {
		t.Fatalf("DEL of a prepared ADD never committed: %v", err)
	}
	recs := e.Records()
	if len(recs) != 1 || recs[0].IfName != "net1" || !recs[0].Complete || e.InPod("net2") {
		t.Fatalf("records %+v, net2 in pod %v: want net1's complete record alone", recs, e.InPod("net2"))
	}
	dev2 := e.Devs[0]
	if recs[0].DeviceID == dev2 {
		dev2 = e.Devs[1]
	}
	if !e.OnHost(dev2) {
		t.Errorf("device %s of the DEL not back on the host", dev2)
	}
}

// A delegate ADD that fails in the entry point (host-device moved the device into
// the pod, then its IPAM failed) is undone there (its DEL), and the commit of the
// error rolls back: the record and the CNI file go, the device is free for the
// next attachment, and the delegate's error is what the runtime sees.
func TestCommitOfDelegateErrorRollsBack(t *testing.T) {
	e := newSplitEnv(t, 1)
	good := e.conf["delegate"]
	e.conf["delegate"] = map[string]any{"type": "host-device",
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]string{"address": "not-an-address"}}}}
	prep, err := e.p.PrepareAdd(e.args("net1"))
	if err != nil {
		t.Fatal(err)
	}
	_, derr := e.run(prep.Delegate, true)
	if derr == nil {
		t.Fatal("the delegate ADD with a bad static address succeeded")
	}
	if e.OnHost(e.Devs[0]) {
		t.Fatal("host-device failed before it moved the device: the test undoes nothing")
	}
	if _, err := e.run(prep.Delegate, false); err != nil { // the runner undoes its failed ADD
		t.Fatal(err)
	}
	_, err = prep.CommitAdd(nil, derr)
	te := wantCode(t, "commit of a delegate error", err, ErrDelegate)
	if !strings.Contains(te.Msg, "delegate ADD failed for device "+e.Devs[0]) || prep.UndoPending() {
		t.Errorf("error %q (undo pending %v): want the delegate's failure named, nothing left to undo", te.Msg, prep.UndoPending())
	}
	if recs := e.Records(); len(recs) != 0 || !e.OnHost(e.Devs[0]) {
		t.Fatalf("after the rollback: records %+v, device on host %v", recs, e.OnHost(e.Devs[0]))
	}
	if _, err := os.Stat(filepath.Join(e.Root, "devinfo", "cni", "fast-net-c1_net1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CNI device-info file after the rollback: %v", err)
	}
	if events, _ := e.kube.recorded(); len(events) != 1 || !events[0].Warning {
		t.Errorf("events %+v: want one warning", events)
	}
	e.conf["delegate"] = good
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net2")) }); err != nil {
		t.Fatalf("next attachment: %v", err)
	}
	if !e.InPod("net2") {
		t.Error("the next attachment did not get the device")
	}
}

// A commit that fails after the delegates' ADD succeeded (network-status required,
// the API server refusing) leaves the undo to the runner: UndoPending, the device
// still held until its DEL ran and Rollback freed it.
func TestCommitFailureAfterDelegateWaitsForTheUndo(t *testing.T) {
	e := newSplitEnv(t, 1)
	e.kube.setErr = errors.New("forbidden")
	prep, err := e.p.PrepareAdd(e.args("net1"))
	if err != nil {
		t.Fatal(err)
	}
	result, err := e.run(prep.Delegate, true)
	if err != nil {
		t.Fatal(err)
	}
	_, err = prep.CommitAdd(result, nil)
	wantCode(t, "commit with network-status refused", err, ErrKube)
	if !prep.UndoPending() || len(e.Records()) != 1 {
		t.Fatalf("undo pending %v, records %+v: want the device held until the delegates' DEL", prep.UndoPending(), e.Records())
	}
	if _, err := e.run(prep.Delegate, false); err != nil {
		t.Fatal(err)
	}
	prep.Rollback()
	if recs := e.Records(); len(recs) != 0 || !e.OnHost(e.Devs[0]) || prep.UndoPending() {
		t.Fatalf("after Rollback: records %+v, device on host %v", recs, e.OnHost(e.Devs[0]))
	}
	if _, err := prep.CommitAdd(result, nil); err == nil {
		t.Error("a second commit of a rolled back ADD succeeded")
	}
}

// Two attachments prepared at once each take a different device (host-device
// could not move one device twice), and the state lock is not held between the
// steps: held until a commit, it would keep the other prepare waiting for ever.
func TestConcurrentPreparesTakeDifferentDevices(t *testing.T) {
	e := newSplitEnv(t, 2)
	ifNames := []string{"net1", "net2"}
	preps := make([]*PreparedAdd, len(ifNames))
	errs := make([]error, len(ifNames))
	var wg sync.WaitGroup
	for i, ifName := range ifNames {
		args := e.args(ifName)
		wg.Go(func() { preps[i], errs[i] = e.p.PrepareAdd(args) })
	}
	wg.Wait()
	for i := range preps {
		if errs[i] != nil {
			t.Fatalf("prepare %s: %v", ifNames[i], errs[i])
		}
	}
	if preps[0].DeviceID == preps[1].DeviceID {
		t.Fatalf("both attachments prepared with device %s", preps[0].DeviceID)
	}
	for i, prep := range preps {
		wg.Go(func() {
			result, derr := e.run(prep.Delegate, true)
			if derr != nil {
				errs[i] = derr
				return
			}
			_, errs[i] = prep.CommitAdd(result, nil)
		})
	}
	wg.Wait()
	for i, ifName := range ifNames {
		if errs[i] != nil || !e.InPod(ifName) {
			t.Errorf("%s: commit %v, in pod %v", ifName, errs[i], e.InPod(ifName))
		}
	}
	if recs := e.Records(); len(recs) != 2 || !recs[0].Complete || !recs[1].Complete {
		t.Errorf("records %+v: want two complete", recs)
	}
}

// A node that trusts explicit device IDs asks the kubelet nothing for an
// ADD whose config names its device, which it takes unchecked (a Get would
// only spend the kubelet's rate limit); an ADD naming none still asks, once.
func TestTrustedDeviceIDAsksTheKubeletNothing(t *testing.T) {
	e := newSplitEnv(t, 2)
	e.conf["trustDeviceID"] = true
	e.conf["runtimeConfig"] = map[string]any{"deviceID": e.Devs[1]}
	prep, err := e.p.PrepareAdd(e.args("net1"))
	if err != nil {
		t.Fatal(err)
	}
	prep.Close()
	if prep.Delegate == nil || !strings.Contains(string(prep.Delegate.ConfList), e.Devs[1]) {
		t.Fatalf("trusted ADD prepared %+v, want the delegate given %s", prep.Delegate, e.Devs[1])
	}
	if gets := e.PodResources.Calls("Get"); gets != 0 {
		t.Errorf("trusted ADD of a named device: %d PodResources Gets, want none", gets)
	}
	delete(e.conf, "runtimeConfig")
	prep, err = e.p.PrepareAdd(e.args("net2"))
	if err != nil {
		t.Fatal(err)
	}
	prep.Close()
	if gets := e.PodResources.Calls("Get"); gets != 1 {
		t.Errorf("ADD naming no device on a trusting node: %d PodResources Gets, want 1", gets)
	}
}

// A fresh ADD asks the kubelet about its pod first thing, before it parses
// its config, and takes that answer rather than asking again: one Get per
// ADD. A config the call then refuses still gave the client back.
func TestAddAsksTheKubeletFirstThingOnce(t *testing.T) {
	e := newSplitEnv(t, 1)
	var opened, released atomic.Int32
	e.p.PodResources = func(socket string, timeout time.Duration, _ *slog.Logger) (*podresources.Client, func(), error) {
		c, err := podresources.New(socket, podresources.WithTimeout(timeout))
		if err != nil {
			return nil, nil, err
		}
		opened.Add(1)
		return c, func() { released.Add(1); _ = c.Close() }, nil
	}
	prep, err := e.p.PrepareAdd(e.args("net1"))
	if err != nil {
		t.Fatal(err)
	}
	prep.Close()
	if gets := e.PodResources.Calls("Get"); gets != 1 || opened.Load() != 1 || released.Load() != 1 {
		t.Errorf("ADD: %d Gets, client opened %d times and given back %d times; want 1 of each", gets, opened.Load(), released.Load())
	}
	e.conf["resourceName"] = 42 // a config that does not decode
	if _, err := e.p.PrepareAdd(e.args("net2")); err == nil {
		t.Fatal("ADD with an undecodable config succeeded")
	}
	if opened.Load() != 2 || released.Load() != 2 {
		t.Errorf("refused ADD: client opened %d times and given back %d times; want it asked before the config was read (2), "+
			"and given back (2)", opened.Load(), released.Load())
	}
}

// With Plugin.Go set, the Get an ADD starts first thing runs on it (the
// agent's warm goroutines), and the ADD takes its answer.
func TestAddGetRunsOnPluginGo(t *testing.T) {
	e := newSplitEnv(t, 1)
	var ran atomic.Int32
	e.p.Go = func(f func()) { ran.Add(1); go f() }
	prep, err := e.p.PrepareAdd(e.args("net1"))
	if err != nil {
		t.Fatal(err)
	}
	defer prep.Close()
	if prep.DeviceID != e.Devs[0] || ran.Load() != 1 || e.PodResources.Calls("Get") != 1 {
		t.Errorf("ADD took %q, %d functions run on Plugin.Go, %d Gets; want %s, 1, 1", prep.DeviceID, ran.Load(),
			e.PodResources.Calls("Get"), e.Devs[0])
	}
}
