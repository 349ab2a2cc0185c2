package plugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/devplumb/devplumb/pkg/cni/config"
)

// callLogger is the logger of one CNI call: the network's logLevel, to its
// logFile and/or stderr (Multus's keys; a runtime gives a plugin no
// per-network environment). DEVPLUMB_DEBUG still turns on debug for all.
// The returned close ends the file; a logFile that cannot be opened leaves
// stderr and says so there, so the call itself never fails for its logs.
func callLogger(conf *config.NetConf, stderr io.Writer) (*slog.Logger, func()) {
	level := conf.Level()
	if os.Getenv("DEVPLUMB_DEBUG") != "" {
		level = slog.LevelDebug
	}
	var out []io.Writer
	if conf.Stderr() {
		out = append(out, stderr)
	}
	closeFile := func() {}
	if conf.LogFile != "" {
		f, err := openLogFile(conf.LogFile)
		if err != nil {
			fmt.Fprintf(stderr, "devplumb: %v; logging to stderr\n", err)
			out = []io.Writer{stderr}
		} else {
			out, closeFile = append(out, f), func() { f.Close() }
		}
	}
	h := slog.NewTextHandler(io.MultiWriter(out...), &slog.HandlerOptions{Level: level})
	return slog.New(h).With("network", conf.Name), closeFile
}

// forCall is the plugin as one call of conf's network sees it: logging at the
// network's level to its log destinations when LogTo is set. The Plugin is
// copied, never changed, so concurrent calls (tests) do not share a logger.
func (p *Plugin) forCall(conf *config.NetConf) (*Plugin, func()) {
	if p.LogTo == nil {
		return p, func() {}
	}
	cp := *p
	var closeLog func()
	cp.Log, closeLog = callLogger(conf, p.LogTo)
	return &cp, closeLog
}

// openLogFile appends to the log file; never through a link, which could make
// a root process append to a file of someone else's choosing.
func openLogFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("logFile %s: %w", path, err)
	}
	return f, nil
}
