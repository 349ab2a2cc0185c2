// Package dirwatch watches one directory with fsnotify and keeps watching it
// when it is removed and created again. inotify drops a watch when its
// directory goes, so a plain watch goes silent forever after, for example, a
// kubelet root or a vswitch socket directory is recreated. While the
// directory is missing, dirwatch watches its nearest existing ancestor and
// follows the creations down to it.
//
// It adds no goroutine: the owner reads Events and Errors of the embedded
// fsnotify.Watcher in its own loop and passes every event to Handle, which
// says what the event means for the directory.
package dirwatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// Change is what one event means for the watched directory.
type Change int

const (
	// InDir is an ordinary event inside the directory.
	InDir Change = iota
	// Ignored is an event of an ancestor while the directory is missing.
	Ignored
	// Gone: the directory was removed or renamed away; everything in it is
	// gone too. Back follows when it exists again.
	Gone
	// Back: the directory exists again and is watched. Events inside it
	// before the watch was in place were not seen: look at it afresh.
	Back
)

// Watcher is an fsnotify watcher of one directory.
type Watcher struct {
	*fsnotify.Watcher
	dir     string
	waiting string // the ancestor watched while dir is missing; "" when dir is watched
}

// New watches dir, which must exist.
func New(dir string) (*Watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("fsnotify: %w", err)
	}
	dir = filepath.Clean(dir)
	if err := fw.Add(dir); err != nil {
		fw.Close()
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	return &Watcher{Watcher: fw, dir: dir}, nil
}

// Dir is the watched directory.
func (w *Watcher) Dir() string { return w.dir }

// Missing reports whether the directory is gone and not yet back.
func (w *Watcher) Missing() bool { return w.waiting != "" }

// Handle classifies ev and, when the directory went or came back, moves the
// watch accordingly.
func (w *Watcher) Handle(ev fsnotify.Event) (Change, error) {
	name := filepath.Clean(ev.Name)
	switch {
	case w.waiting == "" && name == w.dir && ev.Has(fsnotify.Remove|fsnotify.Rename):
		back, err := w.rewatch()
		if back {
			return Back, err
		}
		return Gone, err
	case w.waiting == "":
		return InDir, nil
	case ev.Has(fsnotify.Create) && within(name, w.dir):
		back, err := w.rewatch()
		if back {
			return Back, err
		}
	}
	return Ignored, nil
}

// rewatch watches dir when it exists, else its nearest existing ancestor. It
// reports whether dir itself is watched now.
func (w *Watcher) rewatch() (bool, error) {
	for {
		target := existingAncestor(w.dir)
		if w.waiting != "" && w.waiting != target {
			_ = w.Remove(w.waiting) // it may have gone already
		}
		if err := w.Add(target); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // removed again meanwhile: look again
			}
			return false, fmt.Errorf("watch %s while waiting for %s: %w", target, w.dir, err)
		}
		if target == w.dir {
			w.waiting = ""
			return true, nil
		}
		w.waiting = target
		// The next directory down may have been created before the watch
		// was in place: its Create event would never come.
		if st, err := os.Stat(nextToward(target, w.dir)); err != nil || !st.IsDir() {
			return false, nil
		}
	}
}

// existingAncestor is dir or the nearest ancestor of it that exists ("/" at
// worst).
func existingAncestor(dir string) string {
	for {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// nextToward is the child of ancestor on the way to dir.
func nextToward(ancestor, dir string) string {
	rel, err := filepath.Rel(ancestor, dir)
	if err != nil {
		return dir
	}
	return filepath.Join(ancestor, strings.Split(rel, string(filepath.Separator))[0])
}

// within reports whether path is dir or one of its ancestors.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(dir, path+string(filepath.Separator))
}
