// Package draplugin is the kubelet's side of DRA kubelet plugins, for nodesim.
// Like the kubelet's plugin watcher it watches the registration directory
// (ROOT/plugins_registry) for sockets, asks each one GetInfo
// (pluginregistration v1), accepts plugins of type DRAPlugin that offer a DRA
// gRPC service the kubelet speaks (v1.DRAPlugin, else v1beta1.DRAPlugin),
// answers NotifyRegistrationStatus, and calls NodePrepareResources /
// NodeUnprepareResources on the registered endpoint. Sockets already there at
// Start are registered too: a kubelet restart does not delete them, so drivers
// are registered again without doing anything.
package draplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// retryPeriod is how often a failed registration is tried again while its
// socket exists: the kubelet's plugin reconciler runs once a second.
const retryPeriod = time.Second

// Manager watches one registration directory and keeps the registered plugins.
type Manager struct {
	dir string
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	fsw    *fsnotify.Watcher

	mu      sync.Mutex
	plugins map[string]*Plugin  // by driver name: the newest registration wins
	pending map[string]struct{} // registration sockets being worked on
	changed chan struct{}       // closed and replaced on every change
}

// Start creates dir if needed, registers the plugins whose sockets are
// already there and watches for new ones until Stop.
func Start(dir string, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create plugin registration directory: %w", err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch plugin registration directory: %w", err)
	}
	if err := fsw.Add(dir); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("watch plugin registration directory %s: %w", dir, err)
	}
	m := &Manager{dir: dir, log: log, fsw: fsw, plugins: map[string]*Plugin{},
		pending: map[string]struct{}{}, changed: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	// Watch first, then scan: a socket created in between is seen twice,
	// which pending makes harmless; none is missed.
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.watch()
	}()
	entries, err := os.ReadDir(dir)
	if err != nil {
		m.Stop()
		return nil, fmt.Errorf("read plugin registration directory: %w", err)
	}
	for _, e := range entries {
		m.consider(filepath.Join(dir, e.Name()))
	}
	log.Info("Watching for DRA plugin registrations", "dir", dir)
	return m, nil
}

// Stop ends the watch and closes every plugin connection.
func (m *Manager) Stop() {
	m.cancel()
	m.fsw.Close()
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, p := range m.plugins {
		p.close()
		delete(m.plugins, name)
	}
}

// Dir is the registration directory watched.
func (m *Manager) Dir() string { return m.dir }

func (m *Manager) watch() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case ev, ok := <-m.fsw.Events:
			if !ok {
				return
			}
			switch {
			case ev.Has(fsnotify.Create):
				m.consider(ev.Name)
			case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
				m.forget(ev.Name)
			}
		case err, ok := <-m.fsw.Errors:
			if !ok {
				return
			}
			m.log.Error("Plugin registration directory watch failed", "dir", m.dir, "err", err)
		}
	}
}

// consider starts registering path if it is a socket not already being
// handled; like the kubelet it skips names starting with ".".
func (m *Manager) consider(path string) {
	if strings.HasPrefix(filepath.Base(path), ".") {
		return
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return
	}
	m.mu.Lock()
	if _, busy := m.pending[path]; busy || m.ctx.Err() != nil {
		m.mu.Unlock()
		return
	}
	m.pending[path] = struct{}{}
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		defer func() {
			m.mu.Lock()
			delete(m.pending, path)
			m.mu.Unlock()
		}()
		m.registerUntilDone(path)
	}()
}

// registerUntilDone tries to register the plugin at path until it succeeds,
// its socket goes away or the manager stops, as the kubelet's reconciler does.
func (m *Manager) registerUntilDone(path string) {
	for {
		err := m.register(path)
		if err == nil || errors.Is(err, errRejected) {
			return
		}
		m.log.Error("DRA plugin registration failed, will try again", "socket", path, "err", err)
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(retryPeriod):
		}
		if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
			return
		}
	}
}

// forget deregisters the plugin whose registration socket was path.
func (m *Manager) forget(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, p := range m.plugins {
		if p.RegistrationSocket == path {
			p.close()
			delete(m.plugins, name)
			m.notifyLocked()
			m.log.Info("DRA plugin deregistered: its registration socket is gone", "driver", name, "socket", path)
		}
	}
}

// add makes p the driver's plugin, replacing an older registration.
func (m *Manager) add(p *Plugin) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.plugins[p.Driver]; old != nil {
		m.log.Info("Replacing DRA plugin registration", "driver", p.Driver, "old", old.Endpoint, "new", p.Endpoint)
		old.close()
	}
	m.plugins[p.Driver] = p
	m.notifyLocked()
}

func (m *Manager) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Get returns the driver's plugin, with the kubelet's error when it has none.
func (m *Manager) Get(driver string) (*Plugin, error) {
	if driver == "" {
		return nil, errors.New("DRA driver name is empty")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.plugins[driver]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("DRA driver %s is not registered", driver)
}

// Wait returns the driver's plugin once it is registered; ctx bounds the wait.
func (m *Manager) Wait(ctx context.Context, driver string) (*Plugin, error) {
	for {
		m.mu.Lock()
		p, ch := m.plugins[driver], m.changed
		m.mu.Unlock()
		if p != nil {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("DRA driver %s is not registered (waited: %w)", driver, ctx.Err())
		case <-ch:
		}
	}
}

// Drivers lists the registered drivers, sorted.
func (m *Manager) Drivers() []PluginInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]PluginInfo, 0, len(m.plugins))
	for _, p := range m.plugins {
		out = append(out, p.PluginInfo)
	}
	slices.SortFunc(out, func(a, b PluginInfo) int { return strings.Compare(a.Driver, b.Driver) })
	return out
}
