package agentproto

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/types"
)

// The entry point's requests are written by hand, byte for byte what
// encoding/json writes for them (encode_test.go holds the two equal): the
// entry point is a fresh process per CNI call, and encoding/json's first
// Marshal of a type builds its encoder by reflection over the type and every
// type it holds. For request that was most of what the entry point spent
// beyond the pass-through meta-plugin (make bench P10: 0.7 M instructions,
// hello's frame). The agent, a long-lived process, keeps encoding/json for
// its answers and for reading requests.

// appendJSON appends r as encoding/json marshals it.
func (r *request) appendJSON(b []byte) []byte {
	b = append(b, '{')
	first := true
	field := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, name)
		b = append(b, ':')
	}
	if r.Hello != nil {
		field("hello")
		b = r.Hello.appendJSON(b)
	}
	if r.Lookahead != nil {
		field("lookahead")
		b = r.Lookahead.appendJSON(b)
	}
	if r.Prepare != nil {
		field("prepare")
		b = r.Prepare.appendJSON(b)
	}
	if r.Commit != nil {
		field("commit")
		b = appendCommit(b, r.Commit.Attachment, r.Commit.Result, r.Commit.Error)
	}
	if r.Rollback != nil {
		field("rollback")
		b = appendCommit(b, r.Rollback.Attachment, nil, r.Rollback.Error)
	}
	return append(b, '}')
}

func (h *Hello) appendJSON(b []byte) []byte {
	b = append(b, `{"protocol":`...)
	b = strconv.AppendInt(b, int64(h.Protocol), 10)
	b = append(b, `,"build":`...)
	b = appendString(b, h.Build)
	return append(b, '}')
}

func (p *Prepare) appendJSON(b []byte) []byte {
	b = append(b, `{"command":`...)
	b = appendString(b, p.Command)
	b = append(b, `,"containerID":`...)
	b = appendString(b, p.ContainerID)
	b = appendOmitEmpty(b, "netns", p.Netns)
	b = append(b, `,"ifName":`...)
	b = appendString(b, p.IfName)
	b = appendOmitEmpty(b, "args", p.Args)
	b = appendOmitEmpty(b, "path", p.Path)
	b = append(b, `,"stdinData":`...)
	b = appendBytes(b, p.StdinData)
	b = appendOmitEmpty(b, "nodeConfig", p.NodeConfig)
	return append(b, '}')
}

// appendCommit is a Commit (or, without a result, a Rollback: the same
// fields but the result).
func appendCommit(b []byte, attachment string, result []byte, e *types.Error) []byte {
	b = append(b, `{"attachment":`...)
	b = appendString(b, attachment)
	if len(result) > 0 {
		b = append(b, `,"result":`...)
		b = appendBytes(b, result)
	}
	if e != nil {
		b = append(b, `,"error":{"code":`...)
		b = strconv.AppendUint(b, uint64(e.Code), 10)
		b = append(b, `,"msg":`...)
		b = appendString(b, e.Msg)
		b = appendOmitEmpty(b, "details", e.Details)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendOmitEmpty is a string field tagged omitempty, after another field.
func appendOmitEmpty(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, ',')
	b = appendString(b, name)
	b = append(b, ':')
	return appendString(b, s)
}

// appendBytes is a []byte as encoding/json writes it: base64, null for nil.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

// appendString is s quoted as encoding/json quotes it: HTML-safe, invalid
// UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
