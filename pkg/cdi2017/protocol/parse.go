package protocol

import (
	"slices"
	"strings"
)

// parse checks a call in the draft's order: the caller's version (so an
// unknown version is error 1 whatever the command, as the draft's first
// error example shows), the command, the config, then the command's
// parameters.
func (h Handler) parse(cmd string, env func(string) string, rawConfig []byte, readErr error) (*Request, error) {
	versions := h.versions()
	ver := env(EnvVersion)
	if ver == "" {
		return nil, NewError(ErrCodeEnvVersion, "Incompatible CDI version", "%s is not set (required for every command but VERSION)", EnvVersion)
	}
	if !slices.Contains(versions, ver) {
		return nil, NewError(ErrCodeEnvVersion, "Incompatible CDI version", "Unsupported version: %s", ver)
	}
	switch cmd {
	case CmdInfo, CmdAdd, CmdDel:
	case "":
		return nil, NewError(ErrCodeCommand, "Command unsupported", "%s is not set", EnvCommand)
	default:
		return nil, NewError(ErrCodeCommand, "Command unsupported", "Unsupported command: %s", env(EnvCommand))
	}
	req := &Request{Command: cmd, Version: ver}
	if err := h.readConfig(req, rawConfig, readErr); err != nil {
		return nil, err
	}
	switch cmd {
	case CmdAdd:
		return req, h.parseAdd(req, env)
	case CmdDel:
		return req, parseRequestID(req, env)
	}
	return req, nil
}

// readConfig reads the config from stdin; its version must be one the
// plugin supports and the one the caller asked for.
func (h Handler) readConfig(req *Request, raw []byte, readErr error) error {
	if readErr != nil {
		return NewError(ErrCodeConfigVersion, "Invalid config", "reading the config from stdin: %v", readErr)
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		return err
	}
	if !slices.Contains(h.versions(), cfg.CDIVersion) {
		return NewError(ErrCodeConfigVersion, "Incompatible CDI version of the config", "Unsupported version: %s", cfg.CDIVersion)
	}
	if cfg.CDIVersion != req.Version {
		return NewError(ErrCodeConfigVersion, "Incompatible CDI version of the config",
			"config cdiVersion %s does not match %s=%s", cfg.CDIVersion, EnvVersion, req.Version)
	}
	req.Config, req.RawConfig = cfg, raw
	return nil
}

// parseAdd reads CDI_REQUEST, CDI_REQUEST_ID and CDI_REQUEST_NUMA_LOCALITY.
// Resource-specs are checked before amounts, so a request naming an
// unsupported resource-spec gets error 4 for that spec, as the draft's third
// ADD example shows.
func (h Handler) parseAdd(req *Request, env func(string) string) error {
	raw := env(EnvRequest)
	if raw == "" {
		return NewError(ErrCodeResourceSpec, "resource-spec unsupported", "%s is not set (required for ADD)", EnvRequest)
	}
	for _, part := range strings.Split(raw, ",") {
		spec, _, _ := strings.Cut(part, ":")
		if err := h.checkSpec(req.Config, spec); err != nil {
			return err
		}
	}
	amounts, err := ParseRequest(raw)
	if err != nil {
		return NewError(ErrCodeResourceSpec, "resource-spec unsupported", "%v", err)
	}
	req.Resources = amounts
	if err := parseRequestID(req, env); err != nil {
		return err
	}
	if numa := env(EnvNUMALocality); numa != "" {
		nodes, err := ParseNUMALocality(numa)
		if err != nil {
			return NewError(ErrCodeResourceSpec, "resource-spec unsupported", "%v", err)
		}
		req.NUMALocality = nodes
	}
	return nil
}

func (h Handler) checkSpec(cfg *Config, spec string) error {
	typ, _, err := SplitResourceSpec(spec)
	if err != nil {
		return NewError(ErrCodeResourceSpec, "resource-spec unsupported", "%v", err)
	}
	supports := h.Supports
	if supports == nil {
		supports = func(cfg *Config, spec string) bool { return spec == cfg.Type }
	}
	if typ != cfg.Type || !supports(cfg, spec) {
		return NewError(ErrCodeResourceSpec, "resource-spec unsupported", "Unsupported resource-spec: %s", spec)
	}
	return nil
}

// parseRequestID reads CDI_REQUEST_ID. A missing or malformed one is error
// 5: such an ID can never be known to the plugin, and no other well-known
// code names request IDs.
func parseRequestID(req *Request, env func(string) string) error {
	id := env(EnvRequestID)
	if id == "" {
		return NewError(ErrCodeRequestID, "Unknown request ID", "%s is not set (required for %s)", EnvRequestID, req.Command)
	}
	if err := ValidateRequestID(id); err != nil {
		return NewError(ErrCodeRequestID, "Unknown request ID", "%s: %v", EnvRequestID, err)
	}
	req.RequestID = id
	return nil
}
