package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

const good = `{
  "cniVersion": "1.0.0", "name": "fast-net", "type": "devplumb",
  "resourceName": "example.com/netdev",
  "capabilities": {"deviceID": true, "CNIDeviceInfoFile": true},
  "runtimeConfig": {"portMappings": [], "deviceID": "0000:01:02.3"},
  "delegate": {"type": "host-device", "capabilities": {"deviceID": true}}
}`

func TestParseGoodAppliesDefaults(t *testing.T) {
	c, err := Parse([]byte(good), &nodeconfig.Node{StateDir: "/tmp/x/state"})
	if err != nil {
		t.Fatal(err)
	}
	if c.PodResourcesSocket != DefaultPodResourcesSocket || c.DeviceInfoDir != DefaultDeviceInfoDir {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.StateDir != "/tmp/x/state" || c.NetworkStatus != NetworkStatusRequired {
		t.Errorf("stateDir/networkStatus: %+v", c)
	}
	if c.Events != EventsFailures {
		t.Errorf("events default %q, want %q", c.Events, EventsFailures)
	}
	if len(c.InjectDeviceID) != 1 || c.InjectDeviceID[0] != "deviceID" {
		t.Errorf("injectDeviceID default: %v", c.InjectDeviceID)
	}
	if c.DeviceIDFromConfig() != "0000:01:02.3" {
		t.Errorf("device from runtimeConfig: %q", c.DeviceIDFromConfig())
	}
	if _, ok := c.RuntimeConfig.Raw["portMappings"]; !ok {
		t.Errorf("runtimeConfig keys must be kept: %v", c.RuntimeConfig.Raw)
	}
	if len(c.Delegates) != 1 || c.Delegates[0]["type"] != "host-device" {
		t.Errorf("delegates: %v", c.Delegates)
	}
}

func TestParseAllVersionsAndChain(t *testing.T) {
	for _, v := range SupportedVersions {
		conf := `{"cniVersion":"` + v + `","name":"n","type":"devplumb","deviceID":"eth1","pciBusID":"0000:00:01.0",
		  "delegates":[{"type":"macvlan"},{"type":"tuning"}],"disableCheck":true,"dns":{},"args":{},"ipam":{},"prevResult":{},
		  "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"net1"}]}`
		c, err := Parse([]byte(conf), nil)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if len(c.Delegates) != 2 || c.DeviceIDFromConfig() != "eth1" || len(c.ValidAttachments) != 1 {
			t.Errorf("%s: %+v", v, c)
		}
	}
}

func TestParseErrors(t *testing.T) {
	base := func(extra string) string {
		return `{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":{"type":"host-device"}` + extra + `}`
	}
	cases := []struct {
		name, conf, want string
		decode           bool
	}{
		{"broken json", `{"cniVersion":`, "cannot decode", true},
		{"not an object", `[]`, "cannot decode", true},
		{"unknown key", base(`,"resourceNmae":"x"`), `unknown top-level key "resourceNmae"`, false},
		{"wrong type", base(`,"resourceName":5`), `key "resourceName" must be of type string`, true},
		{"wrong type runtimeConfig", base(`,"runtimeConfig":{"deviceID":1}`), `runtimeConfig.deviceID`, true},
		{"wrong type inject", base(`,"injectDeviceID":"deviceID"`), `"injectDeviceID"`, true},
		{"no version", `{"name":"n","type":"devplumb","delegate":{"type":"x"}}`, `"cniVersion" is missing`, false},
		{"bad version", strings.Replace(base(""), "1.0.0", "0.2.0", 1), `"0.2.0" is not supported`, false},
		{"name traversal", strings.Replace(base(""), `"name":"n"`, `"name":"../n"`, 1), `"name" "../n" is invalid`, false},
		{"resourceName traversal", base(`,"resourceName":"../../etc"`), `"resourceName" "../../etc"`, false},
		{"resourceName dots", base(`,"resourceName":"example.com/.."`), `"resourceName"`, false},
		{"bad logLevel", base(`,"logLevel":"loud"`), `"logLevel" "loud": want one of debug, error, info, panic, verbose, warn, warning`, false},
		{"logs nowhere", base(`,"logToStderr":false`), `the logs would go nowhere`, false},
		{"wrong type logToStderr", base(`,"logToStderr":"no"`), `key "logToStderr" must be of type bool`, true},
		// The kubelet refuses a device plugin resource without a domain: so does the config.
		{"resourceName without domain", base(`,"resourceName":"netdev"`), `must be domain-qualified`, false},
		{"resourceName kubernetes.io", base(`,"resourceName":"kubernetes.io/netdev"`), `reserved for native resources`, false},
		// A DeviceClass's implicit extended resource name (KEP-5004) names a DeviceClass.
		{"resourceName deviceclass", base(`,"resourceName":"deviceclass.resource.kubernetes.io/Hostdev_x"`), `DeviceClass name "Hostdev_x"`, false},
		{"resourceName deviceclass traversal", base(`,"resourceName":"deviceclass.resource.kubernetes.io/../x"`), `DeviceClass name "../x"`, false},
		{"deviceID traversal", base(`,"deviceID":"../x"`), `deviceID "../x" is not a valid device ID`, false},
		{"deviceID slash", base(`,"runtimeConfig":{"deviceID":"a/b"}`), `runtimeConfig.deviceID "a/b"`, false},
		{"cni file dotdot", base(`,"runtimeConfig":{"CNIDeviceInfoFile":"/a/../b"}`), `CNIDeviceInfoFile`, false},
		{"cni file elsewhere", base(`,"runtimeConfig":{"CNIDeviceInfoFile":"/etc/passwd"}`),
			`"runtimeConfig.CNIDeviceInfoFile" "/etc/passwd" must be a file directly in /var/run/k8s.cni.cncf.io/devinfo/cni`, false},
		{"cni file in a subdir", base(`,"runtimeConfig":{"CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/cni/x/y"}`), `must be a file directly in`, false},
		{"cni file is the dir", base(`,"runtimeConfig":{"CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/cni/"}`), `must be a file directly in`, false},
		{"cni file NUL", base(`,"runtimeConfig":{"CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/cni/a\u0000b"}`), `contains a NUL byte`, false},
		{"cni file name too long", base(`,"runtimeConfig":{"CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/cni/` + strings.Repeat("x", 256) + `"}`),
			`file name of 256 bytes`, false},
		{"cni file in dp", base(`,"runtimeConfig":{"CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/dp/x"}`), `directly in /var/run/k8s.cni.cncf.io/devinfo/cni`, false},
		{"top-level ipam", base(`,"ipam":{"type":"host-local"}`), `"ipam" at the top level is not used by devplumb: move it into "delegate"`, false},
		{"both delegates", base(`,"delegates":[{"type":"x"}]`), `both "delegate" and "delegates"`, false},
		{"no delegate", `{"cniVersion":"1.0.0","name":"n","type":"devplumb"}`, `no delegate`, false},
		{"delegate not object", `{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":"x"}`, `"delegate" must be a JSON object`, true},
		{"delegate no type", `{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":{}}`, `no string "type"`, false},
		{"delegate path type", `{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":{"type":"../bin/sh"}}`, `must be a plugin binary name`, false},
		{"empty chain", `{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegates":[]}`, `"delegates" is empty`, false},
		{"bad networkStatus", base(`,"networkStatus":"maybe"`), `"networkStatus" "maybe"`, false},
		{"bad events", base(`,"events":"failure"`), `"events" "failure" is invalid: use "failures" (the default), "all" or "none"`, false},
		{"events not a string", base(`,"events":true`), `events`, true},
		{"reserved inject", base(`,"injectDeviceID":["type"]`), `reserved`, false},
		{"bad nad", base(`,"networkAttachmentDefinition":"a/b/c"`), `networkAttachmentDefinition`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.conf), nil)
			if err == nil {
				t.Fatalf("no error for %s", tc.conf)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if errors.Is(err, ErrDecode) != tc.decode {
				t.Errorf("errors.Is(ErrDecode) = %v, want %v (%v)", !tc.decode, tc.decode, err)
			}
		})
	}
}

// A caller-given CNIDeviceInfoFile is accepted in this config's cni dir and
// in the default one Multus hard-codes.
func TestCNIDeviceInfoFileAllowed(t *testing.T) {
	for _, f := range []string{"/d/cni/net-c1_net1", "/var/run/k8s.cni.cncf.io/devinfo/cni/ns-nad-c1_net1"} {
		c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"devplumb",`+
			`"runtimeConfig":{"CNIDeviceInfoFile":"`+f+`"},"delegate":{"type":"host-device"}}`), &nodeconfig.Node{DeviceInfoDir: "/d"})
		if err != nil || c.RuntimeConfig.CNIDeviceInfoFile != f {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestNADRef(t *testing.T) {
	c := &NetConf{Name: "fast-net"}
	if ns, n := c.NADRef("pods"); ns != "pods" || n != "fast-net" {
		t.Errorf("default ref: %s/%s", ns, n)
	}
	c.NAD = "infra/sriov"
	if ns, n := c.NADRef("pods"); ns != "infra" || n != "sriov" {
		t.Errorf("explicit ref: %s/%s", ns, n)
	}
}

func TestLogControl(t *testing.T) {
	base := `{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":{"type":"x"}%s}`
	for _, c := range []struct {
		extra  string
		level  slog.Level
		stderr bool
	}{
		{"", slog.LevelWarn, true},
		{`,"logLevel":"debug"`, slog.LevelDebug, true},
		{`,"logLevel":"verbose","logToStderr":false`, slog.LevelInfo, false},
		{`,"logLevel":"panic"`, slog.LevelError, true},
	} {
		conf, err := Parse([]byte(fmt.Sprintf(base, c.extra)), &nodeconfig.Node{LogFile: "/var/log/devplumb.log"})
		if err != nil {
			t.Fatalf("%s: %v", c.extra, err)
		}
		if conf.Level() != c.level || conf.Stderr() != c.stderr {
			t.Errorf("%s: level %v stderr %v, want %v %v", c.extra, conf.Level(), conf.Stderr(), c.level, c.stderr)
		}
	}
}

// A pod asks for the devices of a DeviceClass with no extendedResourceName
// by deviceclass.resource.kubernetes.io/<class> (KEP-5004): a config naming
// that resource parses.
func TestParseDeviceClassResourceName(t *testing.T) {
	const res = "deviceclass.resource.kubernetes.io/hostdev.example.com"
	conf := `{"cniVersion":"1.0.0","name":"n","type":"devplumb","resourceName":"` + res + `","delegate":{"type":"host-device"}}`
	c, err := Parse([]byte(conf), nil)
	if err != nil || c.ResourceName != res {
		t.Fatalf("Parse: %v, %+v", err, c)
	}
}

// A network config's author may be any namespace user: the keys that name
// a host path, a credential or a socket, or switch a check off, are refused
// with where they belong now, whatever their value, and the node's values
// stay in force.
func TestNodeKeysRefused(t *testing.T) {
	node := &nodeconfig.Node{Kubeconfig: "/etc/cni/net.d/devplumb.d/devplumb.kubeconfig", StateDir: "/var/lib/cni/devplumb"}
	for _, k := range nodeconfig.Keys {
		val := `"/etc/cni/net.d/devplumb.d/devplumb.kubeconfig"`
		if k == "trustDeviceID" {
			val = "true"
		}
		conf := `{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":{"type":"x"},"` + k + `":` + val + `}`
		_, err := Parse([]byte(conf), node)
		if !errors.Is(err, ErrNodeKey) {
			t.Fatalf("%s: error %v, want ErrNodeKey", k, err)
		}
		for _, want := range []string{`"` + k + `" may not be set in a network config`, nodeconfig.DefaultPath, "$DEVPLUMB_NODE_CONFIG"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", k, err, want)
			}
		}
	}
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":{"type":"x"}}`), node)
	if err != nil || c.Kubeconfig != node.Kubeconfig || c.StateDir != node.StateDir || c.TrustDeviceID {
		t.Fatalf("node settings not applied: %v %+v", err, c)
	}
}
