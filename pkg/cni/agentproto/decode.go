package agentproto

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/types"
)

// The entry point reads the agent's answers by hand when they are as
// encoding/json writes them (every field in its struct order, once, no
// space, strings without escapes), else with encoding/json: a fresh process
// saves building json's reflected decoders for the answer types, as it does
// their encoders for its requests (encode.go). Either way the result is
// json.Unmarshal's (decode_test.go).

// decodeResponse decodes an answer into r as json.Unmarshal does.
func decodeResponse(data []byte, r *response) error {
	s := &scanner{b: data}
	var fast response
	if s.response(&fast) && s.i == len(s.b) {
		*r = fast
		return nil
	}
	return json.Unmarshal(data, r)
}

// scanner reads the canonical encoding; any method returning false means
// "not canonical here": the caller falls back to encoding/json.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) byte(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads {"k":v,...} whose keys come in the order of names, each at
// most once; value reads the value of names[k].
func (s *scanner) object(names []string, value func(k int) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	next := 0
	for {
		key, ok := s.str()
		if !ok || !s.byte(':') {
			return false
		}
		k := next
		for k < len(names) && names[k] != key {
			k++
		}
		if k == len(names) || !value(k) {
			return false
		}
		next = k + 1
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// str reads a string without escapes, control characters or invalid UTF-8.
func (s *scanner) str() (string, bool) {
	if !s.byte('"') {
		return "", false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return string(v), utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// bytes reads a []byte: base64, or null.
func (s *scanner) bytes() ([]byte, bool) {
	if s.lit("null") {
		return nil, true
	}
	v, ok := s.str()
	if !ok {
		return nil, false
	}
	out, err := base64.StdEncoding.DecodeString(v)
	return out, err == nil
}

func (s *scanner) lit(l string) bool {
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// uint reads digits (no sign, fraction or exponent), as for a uint field.
func (s *scanner) uint() (uint64, bool) {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n, err := strconv.ParseUint(string(s.b[start:s.i]), 10, 64)
	return n, err == nil && (s.i-start == 1 || s.b[start] != '0')
}

// raw is the next value whole (an object or array, nested), for
// encoding/json to decode into an untyped value; strings in it may hold
// escapes.
func (s *scanner) raw() ([]byte, bool) {
	start, depth, in := s.i, 0, false
	for ; s.i < len(s.b); s.i++ {
		c := s.b[s.i]
		switch {
		case in && c == '\\':
			s.i++
		case c == '"':
			in = !in
		case in:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				s.i++
				return s.b[start:s.i], true
			}
		case depth == 0:
			return nil, false // a scalar: not what these fields hold
		}
	}
	return nil, false
}

func (s *scanner) response(r *response) bool {
	return s.object([]string{"hello", "prepare", "commit", "rollback", "error"}, func(k int) bool {
		switch k {
		case 0:
			r.Hello = &Hello{}
			return s.hello(r.Hello)
		case 1:
			r.Prepare = &PrepareAnswer{}
			return s.prepareAnswer(r.Prepare)
		case 2:
			r.Commit = &CommitAnswer{}
			return s.commitAnswer(r.Commit)
		case 3:
			r.Rollback = &RollbackAnswer{}
			return s.object(nil, nil)
		}
		var ok bool
		r.Error, ok = s.str()
		return ok
	})
}

func (s *scanner) hello(h *Hello) bool {
	return s.object([]string{"protocol", "build"}, func(k int) bool {
		var ok bool
		if k == 1 {
			h.Build, ok = s.str()
			return ok
		}
		neg := s.byte('-')
		n, ok := s.uint()
		if !ok || n > 1<<31 {
			return false
		}
		h.Protocol = int(n)
		if neg {
			h.Protocol = -h.Protocol
		}
		return true
	})
}

func (s *scanner) prepareAnswer(a *PrepareAnswer) bool {
	return s.object([]string{"attachment", "delegate", "error", "result"}, func(k int) bool {
		var ok bool
		switch k {
		case 0:
			a.Attachment, ok = s.str()
		case 1:
			a.Delegate = &Delegate{}
			ok = s.delegate(a.Delegate)
		case 2:
			a.Error, ok = s.cniError()
		default:
			a.Result, ok = s.bytes()
		}
		return ok
	})
}

func (s *scanner) delegate(d *Delegate) bool {
	return s.object([]string{"confList", "capabilityArgs", "runtime", "cacheDir"}, func(k int) bool {
		var ok bool
		switch k {
		case 0:
			d.ConfList, ok = s.bytes()
		case 1:
			var raw []byte
			if raw, ok = s.raw(); ok {
				ok = json.Unmarshal(raw, &d.CapabilityArgs) == nil && d.CapabilityArgs != nil
			}
		case 2:
			d.Runtime = &Runtime{}
			ok = s.runtime(d.Runtime)
		default:
			d.CacheDir, ok = s.str()
		}
		return ok
	})
}

func (s *scanner) runtime(r *Runtime) bool {
	return s.object([]string{"containerID", "netns", "ifName", "args"}, func(k int) bool {
		var ok bool
		switch k {
		case 0:
			r.ContainerID, ok = s.str()
		case 1:
			r.NetNS, ok = s.str()
		case 2:
			r.IfName, ok = s.str()
		default:
			ok = s.args(&r.Args)
		}
		return ok
	})
}

// args reads [["k","v"],...].
func (s *scanner) args(out *[][2]string) bool {
	if !s.byte('[') {
		return false
	}
	*out = [][2]string{}
	if s.byte(']') {
		return true
	}
	for {
		var kv [2]string
		var ok bool
		if !s.byte('[') {
			return false
		}
		if kv[0], ok = s.str(); !ok || !s.byte(',') {
			return false
		}
		if kv[1], ok = s.str(); !ok || !s.byte(']') {
			return false
		}
		*out = append(*out, kv)
		if s.byte(']') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

func (s *scanner) commitAnswer(a *CommitAnswer) bool {
	return s.object([]string{"result", "error", "undo"}, func(k int) bool {
		var ok bool
		switch k {
		case 0:
			a.Result, ok = s.bytes()
		case 1:
			a.Error, ok = s.cniError()
		default:
			a.Undo, ok = s.lit("true"), true
			if !a.Undo {
				ok = s.lit("false")
			}
		}
		return ok
	})
}

func (s *scanner) cniError() (*types.Error, bool) {
	e := &types.Error{}
	return e, s.object([]string{"code", "msg", "details"}, func(k int) bool {
		var ok bool
		switch k {
		case 0:
			var n uint64
			n, ok = s.uint()
			e.Code = uint(n)
		case 1:
			e.Msg, ok = s.str()
		default:
			e.Details, ok = s.str()
		}
		return ok
	})
}
