package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// Every bad input gives a CNI error JSON and writes nothing outside the
// configured directories (nor any CNI file or claim inside them).
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "0000:01:02.3")
	e.setPod("default", "evil", "../evil")
	good := func(mod func(map[string]any)) []byte {
		c := e.conf("fast-net", e.recorder(nil))
		if mod != nil {
			mod(c)
		}
		return mustJSON(t, c)
	}
	set := func(k string, v any) func(map[string]any) { return func(c map[string]any) { c[k] = v } }
	args := podArgs("default", "p1")
	cases := []struct {
		name        string
		stdin       []byte
		cid, ifName string
		args        string
		code        uint
		msg         string
		// verbatim: stdin keeps the node config's keys (e.run moves them
		// to a node config otherwise).
		verbatim bool
	}{
		{name: "broken JSON", stdin: []byte(`{"cniVersion":"1.0.0",`), code: types.ErrDecodingFailure, msg: "network config"},
		{name: "wrong type", stdin: good(set("resourceName", 5)), code: types.ErrDecodingFailure, msg: `"resourceName" must be of type string`},
		{name: "wrong type delegate", stdin: good(set("delegate", []int{1})), code: types.ErrDecodingFailure, msg: `"delegate" must be a JSON object`},
		{name: "unknown key", stdin: good(set("resourcename", "x")), code: types.ErrInvalidNetworkConfig, msg: `unknown top-level key "resourcename"`},
		{name: "resourceName traversal", stdin: good(set("resourceName", "../../evil")), code: types.ErrInvalidNetworkConfig, msg: "resourceName"},
		{name: "deviceID traversal", stdin: good(set("deviceID", "../../evil")), code: types.ErrInvalidNetworkConfig, msg: "deviceID"},
		{name: "runtimeConfig deviceID traversal", stdin: good(set("runtimeConfig", map[string]string{"deviceID": "../evil"})),
			code: types.ErrInvalidNetworkConfig, msg: "runtimeConfig.deviceID"},
		{name: "CNIDeviceInfoFile traversal", stdin: good(set("runtimeConfig", map[string]string{"CNIDeviceInfoFile": "/tmp/../evil"})),
			code: types.ErrInvalidNetworkConfig, msg: "CNIDeviceInfoFile"},
		{name: "name traversal", stdin: good(set("name", "../evil")), msg: "network name"},
		// A node's setting in a network config is refused whatever its value
		// (TestNADCannotNameNodeSettings has each key).
		{name: "stateDir relative", stdin: good(set("stateDir", "evil")), verbatim: true, code: types.ErrInvalidNetworkConfig,
			msg: `"stateDir" may not be set in a network config`},
		{name: "ifname traversal", stdin: good(nil), ifName: "../evil", msg: "interface name"},
		{name: "containerID traversal", stdin: good(nil), cid: "../evil", msg: "container"},
		{name: "kubelet device ID traversal", stdin: good(nil), args: podArgs("default", "evil"), code: 100, msg: "no usable device"},
		{name: "pod unknown to kubelet", stdin: good(nil), args: podArgs("default", "nobody"), code: 100, msg: "default/nobody"},
		{name: "no pod identity", stdin: good(nil), args: "IgnoreUnknown=1", code: types.ErrInvalidEnvironmentVariables, msg: "K8S_POD_NAME"},
		{name: "unknown CNI_ARGS", stdin: good(nil), args: "FOO=bar;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1",
			code: types.ErrInvalidEnvironmentVariables, msg: "IgnoreUnknown"},
		{name: "no device source", stdin: good(set("resourceName", "")), code: 107, msg: "no device source"},
		// Under Multus, a pod that does not request the NAD's resource gets no deviceID.
		{name: "no device from Multus", stdin: good(func(c map[string]any) {
			c["resourceName"] = ""
			c["capabilities"] = map[string]bool{"deviceID": true}
		}), code: 107, msg: `pod default/p1 has no device for network "fast-net": the caller passed no runtimeConfig.deviceID`},
		// ... and a DRA pod gets none at all from Multus v4.2: the error says what to set.
		{name: "no device from Multus, DRA hint", stdin: good(func(c map[string]any) {
			c["resourceName"] = ""
			c["capabilities"] = map[string]bool{"deviceID": true}
		}), code: 107, msg: `a DRA ResourceClaim, which Multus does not pass: "resourceName" and "kubeconfig"`},
		{name: "prevResult not a result", stdin: good(set("prevResult", 5)), code: types.ErrDecodingFailure, msg: `"prevResult"`},
		{name: "unsupported version", stdin: good(set("cniVersion", "0.2.0")), msg: "0.2.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cid, ifName, a := "c1", "net1", args
			if tc.cid != "" {
				cid = tc.cid
			}
			if tc.ifName != "" {
				ifName = tc.ifName
			}
			if tc.args != "" {
				a = tc.args
			}
			e.verbatim = tc.verbatim
			_, ce := e.run("ADD", tc.stdin, cid, pod.Path(), ifName, a)
			e.verbatim = false
			if ce == nil {
				t.Fatal("ADD succeeded")
			}
			if tc.code != 0 && ce.Code != tc.code {
				t.Errorf("code %d, want %d (%s)", ce.Code, tc.code, ce.Msg)
			}
			if !strings.Contains(ce.Msg+ce.Details, tc.msg) {
				t.Errorf("message %q / %q does not mention %q", ce.Msg, ce.Details, tc.msg)
			}
			e.assertNothingWritten(t)
		})
	}
}

// An invalid device plugin file fails ADD with code 102 before the delegate.
func TestInvalidDPDeviceInfo(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", "0000:01:02.3")
	dp := filepath.Join(e.devinfoDir, "dp", "example.com-netdev-0000:01:02.3-device.json")
	if err := os.MkdirAll(filepath.Dir(dp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dp, []byte(`{"type":"pci","version":"1.1.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, ce := e.run("ADD", mustJSON(t, e.conf("fast-net", e.recorder(nil))), "c1", pod.Path(), "net1", podArgs("default", "p1"))
	if ce == nil || ce.Code != 102 || !strings.Contains(ce.Msg, "invalid") {
		t.Fatalf("error %+v", ce)
	}
	e.assertNothingWritten(t)
	if _, err := os.Stat(filepath.Join(e.recordDir)); err == nil {
		t.Error("the delegate ran despite the invalid device-info")
	}
}

// assertNothingWritten: the temp root holds only the configured dirs, no CNI
// file, no claim, and nothing named evil anywhere near it.
func (e *env) assertNothingWritten(t *testing.T) {
	t.Helper()
	allowed := []string{e.devinfoDir, e.stateDir, e.confDir, e.recordDir, e.nodeDir()}
	err := filepath.WalkDir(filepath.Dir(e.root), func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == filepath.Dir(e.root) || p == e.root {
			return nil
		}
		if strings.Contains(d.Name(), "evil") {
			t.Errorf("traversal wrote %s", p)
		}
		if !strings.HasPrefix(p, e.root) {
			return fs.SkipDir
		}
		for _, a := range allowed {
			if p == a || strings.HasPrefix(p, a+"/") {
				return nil
			}
		}
		t.Errorf("written outside the configured dirs: %s", p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.devinfoDir, "cni")); len(entries) != 0 {
		t.Errorf("CNI files left: %v", entries)
	}
	if st := e.state(); len(st) != 0 {
		t.Errorf("claims left: %+v", st)
	}
}
