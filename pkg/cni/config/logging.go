package config

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// logLevels maps Multus's logLevel names (and slog's) to levels: a runtime
// runs the plugin, so a network's config is the only place to ask one
// network for more (or less) logging. Multus's "verbose" is between debug
// and error: info here; "panic" logs only what fails: error here.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug, "verbose": slog.LevelInfo, "info": slog.LevelInfo,
	"warning": slog.LevelWarn, "warn": slog.LevelWarn, "error": slog.LevelError, "panic": slog.LevelError,
}

// DefaultLogLevel is used without logLevel: only what an operator must see.
const DefaultLogLevel = slog.LevelWarn

func (c *NetConf) validateLog() error {
	if _, ok := logLevels[c.LogLevel]; c.LogLevel != "" && !ok {
		names := make([]string, 0, len(logLevels))
		for n := range logLevels {
			names = append(names, n)
		}
		slices.Sort(names)
		return fmt.Errorf(`"logLevel" %q: want one of %s`, c.LogLevel, strings.Join(names, ", "))
	}
	if c.LogToStderr != nil && !*c.LogToStderr && c.LogFile == "" {
		return fmt.Errorf(`"logToStderr" is false and the node config has no "logFile": the logs would go nowhere`)
	}
	return nil
}

// Level is the network's log level (DefaultLogLevel when not set).
func (c *NetConf) Level() slog.Level {
	if l, ok := logLevels[c.LogLevel]; ok {
		return l
	}
	return DefaultLogLevel
}

// Stderr says whether logs go to stderr: yes unless logToStderr is false
// (Multus's default too).
func (c *NetConf) Stderr() bool { return c.LogToStderr == nil || *c.LogToStderr }
