// Package logging gives the daemons (netdev-dp, nodesim, cdi-adapter) one way
// to choose a log level and format, so operators learn one set of flags.
package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Flags are --log-level and --log-format, registered on a FlagSet.
type Flags struct {
	Level  string
	Format string
}

// Register adds --log-level (debug, info, warn, error) and --log-format
// (text, json) to fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.Format, "log-format", "text", "log format: text or json")
	return f
}

// New builds the logger the flags ask for, writing to w.
func (f *Flags) New(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.Level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.Format)
}
