package agentproto

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// Every answer the agent writes (encoding/json) is read as json.Unmarshal
// reads it, by the hand-written path where it applies, and by
// encoding/json where it does not (escapes, an error's quotes).
func TestResponseDecodingIsEncodingJSONs(t *testing.T) {
	del := &Delegate{ConfList: []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"}]}`),
		CapabilityArgs: map[string]any{"deviceID": "0000:03:00.1", "io.kubernetes.cri.pod-annotations": map[string]any{"a": "\"}]{["},
			"portMappings": []any{map[string]any{"hostPort": 8080.0}}},
		Runtime:  &Runtime{ContainerID: "c1", NetNS: "/var/run/netns/p", IfName: "net1", Args: [][2]string{{"K8S_POD_NAME", "p"}, {"X", "y"}}},
		CacheDir: "/var/lib/devplumb/libcni/n"}
	resps := []response{
		{},
		{Hello: &Hello{Protocol: ProtocolVersion, Build: "v1.2.3"}},
		{Hello: &Hello{Protocol: -3, Build: "é"}, Error: "protocol version 9 (build x) not served"},
		{Error: `refused: "quoted" \ backslash`},
		{Prepare: &PrepareAnswer{}},
		{Prepare: &PrepareAnswer{Attachment: "0123abcd", Delegate: del}},
		{Prepare: &PrepareAnswer{Attachment: "a", Delegate: &Delegate{ConfList: []byte("{}"), CapabilityArgs: map[string]any{},
			Runtime: &Runtime{Args: [][2]string{}}}}},
		{Prepare: &PrepareAnswer{Delegate: &Delegate{}}},
		{Prepare: &PrepareAnswer{Error: &types.Error{Code: 101, Msg: "no free device", Details: "held by pod \"x\""}}},
		{Prepare: &PrepareAnswer{Result: []byte(`{"cniVersion":"1.0.0"}`)}},
		{Commit: &CommitAnswer{}},
		{Commit: &CommitAnswer{Result: []byte(`{"ips":[]}`)}},
		{Commit: &CommitAnswer{Error: &types.Error{Code: 106, Msg: "m"}, Undo: true}},
		{Rollback: &RollbackAnswer{}},
	}
	for i := range resps {
		data, err := json.Marshal(&resps[i])
		if err != nil {
			t.Fatal(err)
		}
		checkDecoding(t, data)
	}
	s := &scanner{b: mustMarshal(t, &response{Prepare: &PrepareAnswer{Attachment: "a", Delegate: del}})}
	if !s.response(&response{}) || s.i != len(s.b) {
		t.Errorf("an answer with a delegate went to encoding/json, not the hand-written path")
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkDecoding fails unless decodeResponse gives what json.Unmarshal gives
// (the value, or an error for both).
func checkDecoding(t *testing.T, data []byte) {
	t.Helper()
	var want, got response
	werr := json.Unmarshal(data, &want)
	gerr := decodeResponse(data, &got)
	if (werr != nil) != (gerr != nil) || (werr == nil && !reflect.DeepEqual(got, want)) {
		t.Errorf("decoding %s:\n got %+v (%v)\nwant %+v (%v)", data, got, gerr, want, werr)
	}
}

// Whatever the bytes, decodeResponse agrees with json.Unmarshal.
func FuzzResponseDecoding(f *testing.F) {
	f.Add([]byte(`{"hello":{"protocol":2,"build":"b"}}`))
	f.Add([]byte(`{"prepare":{"attachment":"a","delegate":{"confList":"e30=","capabilityArgs":{"k":["\"]"]},` +
		`"runtime":{"containerID":"c","ifName":"i","args":[["a","b"]]},"cacheDir":"/d"}}}`))
	f.Add([]byte(`{"commit":{"result":"e30=","error":{"code":7,"msg":"m","details":"d"},"undo":true}}`))
	f.Add([]byte(`{"prepare":{"error":{"code":01,"msg":"m"}}}`))
	f.Add([]byte(`{"hello":{"protocol":-0,"build":"\u00e9"},"hello":null}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkDecoding(t, data) })
}
