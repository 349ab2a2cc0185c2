package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Default locations of the draft, both overridable by callers.
const (
	DefaultConfDir = "/etc/cdi"
	DefaultBinDir  = "/opt/cdi/bin"
	confDirSuffix  = ".d"
	confExt        = ".conf"
)

// Config is a configuration file: /etc/cdi/<resource-type>.d/<name>.conf.
// Unknown keys are kept out of the way, as CNI does with its configs.
type Config struct {
	CDIVersion string          `json:"cdiVersion"`
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Plugin     string          `json:"plugin"`
	Args       json.RawMessage `json:"args,omitempty"`
}

// ParseConfig decodes and checks a config: a JSON object with the required
// fields, a type by the ABNF, a plugin that is a plain file name and args
// that are an object. A config the plugin cannot take is error 2 (the
// draft has no other code for configs); a type that is no resource-type is
// error 4.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, NewError(ErrCodeConfigVersion, "Invalid config", "config is not a JSON object of the draft: %v", err)
	}
	for _, f := range []struct{ key, val string }{{"cdiVersion", c.CDIVersion}, {"name", c.Name}, {"type", c.Type}, {"plugin", c.Plugin}} {
		if f.val == "" {
			return nil, NewError(ErrCodeConfigVersion, "Invalid config", "config has no %q (required)", f.key)
		}
	}
	if err := ValidateResourceType(c.Type); err != nil {
		return nil, NewError(ErrCodeResourceSpec, "resource-spec unsupported", "config \"type\": %v", err)
	}
	if c.Plugin != filepath.Base(c.Plugin) || strings.HasPrefix(c.Plugin, ".") {
		return nil, NewError(ErrCodeConfigVersion, "Invalid config", "config \"plugin\" %q must be a plain binary name", c.Plugin)
	}
	if len(c.Args) > 0 && !bytes.HasPrefix(bytes.TrimSpace(c.Args), []byte("{")) {
		return nil, NewError(ErrCodeConfigVersion, "Invalid config", "config \"args\" must be a JSON object")
	}
	return &c, nil
}

// ConfigFile is one configuration found on disk.
type ConfigFile struct {
	Path   string
	Raw    []byte // what goes to the plugin's stdin, as written
	Config *Config
}

// LoadConfigFile reads and checks one config file, including that its type
// is the resource-type of its folder (<resource-type>.d).
func LoadConfigFile(path string) (*ConfigFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CDI config %s: %w", path, err)
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("CDI config %s: %w", path, err)
	}
	folder := filepath.Base(filepath.Dir(path))
	want, ok := strings.CutSuffix(folder, confDirSuffix)
	if !ok || want != c.Type {
		return nil, fmt.Errorf("CDI config %s: %w", path, NewError(ErrCodeResourceSpec, "resource-spec unsupported",
			"config type %q must match its folder %s (%s%s)", c.Type, folder, c.Type, confDirSuffix))
	}
	return &ConfigFile{Path: path, Raw: raw, Config: c}, nil
}

// Discover finds the configs in confDir ("" for /etc/cdi): the *.conf files
// in its <resource-type>.d folders, sorted by path. It reads nothing else,
// so the CDI spec files (*.json, *.yaml) that today's CDI library reads
// from the same /etc/cdi are left alone, as that library leaves these
// folders alone (it reads only the files directly in its spec dirs). A
// *.d folder whose name is no resource-type is an error. A missing confDir
// has no configs.
func Discover(confDir string) ([]*ConfigFile, error) {
	if confDir == "" {
		confDir = DefaultConfDir
	}
	entries, err := os.ReadDir(confDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("CDI config dir: %w", err)
	}
	var out []*ConfigFile
	for _, e := range entries {
		typ, ok := strings.CutSuffix(e.Name(), confDirSuffix)
		if !ok || !isDir(filepath.Join(confDir, e.Name())) {
			continue
		}
		if err := ValidateResourceType(typ); err != nil {
			return nil, fmt.Errorf("CDI config folder %s: %w", filepath.Join(confDir, e.Name()), err)
		}
		files, err := filepath.Glob(filepath.Join(confDir, e.Name(), "*"+confExt))
		if err != nil {
			return nil, fmt.Errorf("CDI config folder %s: %w", e.Name(), err)
		}
		slices.Sort(files)
		for _, f := range files {
			cf, err := LoadConfigFile(f)
			if err != nil {
				return nil, err
			}
			out = append(out, cf)
		}
	}
	return out, nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// FindBinary returns the path of the plugin's binary in binDir ("" for
// /opt/cdi/bin): an executable regular file.
func FindBinary(binDir, plugin string) (string, error) {
	if binDir == "" {
		binDir = DefaultBinDir
	}
	if plugin == "" || plugin != filepath.Base(plugin) || strings.HasPrefix(plugin, ".") {
		return "", fmt.Errorf("CDI plugin %q: not a plain binary name", plugin)
	}
	path := filepath.Join(binDir, plugin)
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("CDI plugin %q: %w", plugin, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("CDI plugin %q: %s is not an executable file", plugin, path)
	}
	return path, nil
}
