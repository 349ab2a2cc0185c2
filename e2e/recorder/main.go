// Command recorder is a CNI plugin for tests: it writes exactly what it
// received (stdin, CNI_* environment, the CNIDeviceInfoFile's content) to
// <recordDir>/<COMMAND>-<containerID>_<ifname>.json and returns a small
// result, so tests can assert what devplumb handed its delegate.
//
// Config keys: "recordDir" (required), "failAdd" (ADD fails after
// recording), "writeDeviceInfo" (an object written to the CNIDeviceInfoFile
// on ADD, as a delegate that updates device information would), "mac".
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

type conf struct {
	types.PluginConf
	RecordDir       string          `json:"recordDir"`
	FailAdd         bool            `json:"failAdd"`
	WriteDeviceInfo json.RawMessage `json:"writeDeviceInfo"`
	MAC             string          `json:"mac"`
	IP              string          `json:"ip"`
	RuntimeConfig   struct {
		CNIDeviceInfoFile string `json:"CNIDeviceInfoFile"`
	} `json:"runtimeConfig"`
}

// Record is what the recorder writes; e2e tests decode it.
type Record struct {
	Command        string            `json:"command"`
	Stdin          json.RawMessage   `json:"stdin"`
	Env            map[string]string `json:"env"`
	DeviceInfoFile *string           `json:"deviceInfoFile"`
}

func record(cmd string, args *skel.CmdArgs) (*conf, error) {
	c := &conf{}
	if err := json.Unmarshal(args.StdinData, c); err != nil {
		return nil, fmt.Errorf("recorder: bad config: %w", err)
	}
	if c.RecordDir == "" {
		return nil, errors.New("recorder: recordDir is required")
	}
	r := Record{Command: cmd, Stdin: args.StdinData, Env: map[string]string{}}
	for _, k := range []string{"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"} {
		r.Env[k] = os.Getenv(k)
	}
	if f := c.RuntimeConfig.CNIDeviceInfoFile; f != "" {
		if data, err := os.ReadFile(f); err == nil {
			s := string(data)
			r.DeviceInfoFile = &s
		}
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	name := cmd + ".json"
	if args.ContainerID != "" {
		name = fmt.Sprintf("%s-%s_%s.json", cmd, args.ContainerID, args.IfName)
	}
	if err := os.MkdirAll(c.RecordDir, 0o755); err != nil {
		return nil, err
	}
	return c, os.WriteFile(filepath.Join(c.RecordDir, name), data, 0o644)
}

func add(args *skel.CmdArgs) error {
	c, err := record("ADD", args)
	if err != nil {
		return err
	}
	if c.FailAdd {
		return types.NewError(types.ErrInternal, "recorder: failing ADD as configured", "")
	}
	if len(c.WriteDeviceInfo) > 0 && c.RuntimeConfig.CNIDeviceInfoFile != "" {
		if err := os.WriteFile(c.RuntimeConfig.CNIDeviceInfoFile, c.WriteDeviceInfo, 0o644); err != nil {
			return err
		}
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return err
	}
	if c.PrevResult != nil {
		return types.PrintResult(c.PrevResult, c.CNIVersion)
	}
	return types.PrintResult(result(c, args), c.CNIVersion)
}

func result(c *conf, args *skel.CmdArgs) *current.Result {
	mac := c.MAC
	if mac == "" {
		mac = "02:00:00:00:00:01"
	}
	res := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: args.IfName, Mac: mac, Sandbox: args.Netns}},
	}
	if c.IP != "" {
		ip, ipnet, err := net.ParseCIDR(c.IP)
		if err == nil {
			ipnet.IP = ip
			res.IPs = []*current.IPConfig{{Address: *ipnet, Interface: current.Int(0)}}
		}
	}
	return res
}

func other(cmd string) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		_, err := record(cmd, args)
		return err
	}
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: other("DEL"), Check: other("CHECK"), GC: other("GC"), Status: other("STATUS")},
		version.All, "recorder: a CNI plugin that records what it receives (devplumb tests)")
}
