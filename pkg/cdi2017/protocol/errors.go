package protocol

import (
	"encoding/json"
	"fmt"
)

// Well-known error codes (0-99 are reserved for them; 100+ are the plugin's own).
const (
	ErrCodeEnvVersion    = 1 // CDI version requested via env-var is not supported by plugin
	ErrCodeConfigVersion = 2 // CDI version of the config is not supported by plugin
	ErrCodeCommand       = 3 // the command is not supported
	ErrCodeResourceSpec  = 4 // resource spec is not supported
	ErrCodeRequestID     = 5 // the referenced request ID is unknown
	// FirstPluginCode is the first code a plugin may use for its own errors.
	FirstPluginCode = 100
)

// Error is the draft's error reply. It is written with both pairs of keys:
// the draft's text says "error" and "message", its examples print "code"
// and "msg". Either pair is accepted when read; the text's pair wins when a
// reply has both and they differ.
type Error struct {
	CDIVersion string
	Code       int
	Message    string
	Details    string
}

// NewError makes an error with the given code and a formatted message.
func NewError(code int, msg, detailsFormat string, args ...any) *Error {
	return &Error{Code: code, Message: msg, Details: fmt.Sprintf(detailsFormat, args...)}
}

func (e *Error) Error() string {
	if e.Details == "" {
		return fmt.Sprintf("CDI error %d: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("CDI error %d: %s: %s", e.Code, e.Message, e.Details)
}

type errorJSON struct {
	CDIVersion string  `json:"cdiVersion"`
	Error      *int    `json:"error,omitempty"`
	Message    *string `json:"message,omitempty"`
	Code       *int    `json:"code,omitempty"`
	Msg        *string `json:"msg,omitempty"`
	Details    string  `json:"details,omitempty"`
}

// MarshalJSON writes cdiVersion, error, message, code, msg and details.
func (e *Error) MarshalJSON() ([]byte, error) {
	return json.Marshal(errorJSON{CDIVersion: e.CDIVersion, Error: &e.Code, Message: &e.Message,
		Code: &e.Code, Msg: &e.Message, Details: e.Details})
}

// UnmarshalJSON reads either key pair.
func (e *Error) UnmarshalJSON(data []byte) error {
	var j errorJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	code, msg := j.Error, j.Message
	if code == nil {
		code = j.Code
	}
	if msg == nil {
		msg = j.Msg
	}
	if code == nil {
		return fmt.Errorf("error reply has neither \"error\" nor \"code\"")
	}
	if msg == nil {
		return fmt.Errorf("error reply has neither \"message\" nor \"msg\"")
	}
	*e = Error{CDIVersion: j.CDIVersion, Code: *code, Message: *msg, Details: j.Details}
	return nil
}

// check applies the draft's rules to a parsed error reply.
func (e *Error) check() error {
	if e.CDIVersion == "" {
		return fmt.Errorf("error reply has no cdiVersion")
	}
	if e.Code <= 0 {
		return fmt.Errorf("error reply has code %d: error codes are positive", e.Code)
	}
	return nil
}
