package agentproto

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// The hand-written request encoding is byte for byte encoding/json's, so an
// agent of any build reads it as it read json.Marshal's: every message, with
// fields set and unset, and strings holding what JSON escapes.
func TestRequestEncodingIsEncodingJSONs(t *testing.T) {
	odd := "q\"b\\s</a>&\x00\x01\x1f\x7f\b\f\n\r\t é \u2028\u2029 \xff\xfe end"
	reqs := []request{
		{},
		{Hello: &Hello{Protocol: ProtocolVersion, Build: "v1.2.3-4-gabc"}},
		{Hello: &Hello{Protocol: -7, Build: odd}},
		{Prepare: &Prepare{Command: CmdAdd, ContainerID: "c1", IfName: "net1"}},
		{Prepare: &Prepare{Command: CmdDel, ContainerID: odd, Netns: "/var/run/netns/x", IfName: odd, Args: "K=V;" + odd,
			Path: "/opt/cni/bin:/x", StdinData: []byte(`{"name":"n"` + odd), NodeConfig: "/etc/devplumb/node.json"}},
		{Prepare: &Prepare{Command: CmdCheck, ContainerID: "c", IfName: "i", StdinData: []byte{}}},
		{Commit: &Commit{Attachment: "0123abcd"}},
		{Commit: &Commit{Attachment: "a", Result: []byte(`{"cniVersion":"1.0.0","ips":[]}`)}},
		{Commit: &Commit{Attachment: "a", Error: &types.Error{Code: 999, Msg: odd}}},
		{Commit: &Commit{Attachment: odd, Error: &types.Error{Code: 7, Msg: "m", Details: odd}}},
		{Rollback: &Rollback{Attachment: "a"}},
		{Rollback: &Rollback{Attachment: "a", Error: &types.Error{Msg: "", Details: "d"}}},
		{Lookahead: &Prepare{Command: CmdAdd, ContainerID: odd, IfName: "net1", Args: "K8S_POD_NAME=p", StdinData: []byte(odd)}},
		{Hello: &Hello{}, Lookahead: &Prepare{}, Prepare: &Prepare{}, Commit: &Commit{}, Rollback: &Rollback{}},
	}
	for i := range reqs {
		want, err := json.Marshal(&reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		if got := reqs[i].appendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("request %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// Any string and bytes encode as encoding/json encodes them.
func FuzzRequestEncoding(f *testing.F) {
	f.Add("c", "net1", []byte(`{}`), uint(7))
	f.Add("\xed\xa0\x80<>&\u2028", "\x00", []byte(nil), uint(0))
	f.Fuzz(func(t *testing.T, s, s2 string, data []byte, code uint) {
		r := request{Prepare: &Prepare{Command: s, ContainerID: s2, Netns: s, IfName: s2, Args: s, Path: s2,
			StdinData: data, NodeConfig: s}, Commit: &Commit{Attachment: s, Result: data,
			Error: &types.Error{Code: code, Msg: s2, Details: s}}}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.appendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("got %s\nwant %s", got, want)
		}
	})
}
