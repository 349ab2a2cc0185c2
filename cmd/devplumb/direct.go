package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"
)

// directName is the whole plugin, installed in the same directory as this
// entry point (make build, the images, testenv.Build).
const directName = "devplumb-direct"

// runtimeEnv is the environment the runtime gave, before this process marks
// its delegates' depth: devplumb-direct must see what this process saw.
var runtimeEnv = os.Environ()

// execDirect replaces this process by devplumb-direct with the same argv and
// environment and stdin re-provided from the bytes skel read, so the runtime
// gets exactly what devplumb-direct does (its output, exit code, timeout and
// netns). why is the agent's failure, nil when devplumb-direct is the path
// anyway (GC, STATUS). It returns only when the exec cannot happen: then a
// CNI error names both what failed with the agent and devplumb-direct's path.
func execDirect(args *skel.CmdArgs, why error) error {
	if why != nil && !errors.Is(why, fs.ErrNotExist) {
		// No socket is a node without the agent: nothing to say. Anything
		// else is an agent that should have served and did not.
		fmt.Fprintf(os.Stderr, "devplumb: %v; doing the call with %s\n", why, directName)
	}
	path, err := directPath()
	if err == nil {
		err = stdinFrom(args.StdinData)
	}
	if err == nil {
		err = syscall.Exec(path, os.Args, runtimeEnv)
	}
	if why == nil {
		why = errors.New("the call is devplumb-direct's")
	}
	return &types.Error{Code: types.ErrInternal,
		Msg:     fmt.Sprintf("devplumb cannot do the call: %v, and %s cannot run", why, directName),
		Details: err.Error()}
}

// directPath is devplumb-direct beside this binary, symlinks resolved (an
// entry point linked into the CNI bin dir still finds its own sibling).
func directPath() (string, error) {
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		return "", fmt.Errorf("find this binary's directory: %w", err)
	}
	path := filepath.Join(filepath.Dir(self), directName)
	if err := unix.Access(path, unix.X_OK); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return path, nil
}

// stdinFrom makes fd 0 a memfd holding data at offset 0: the runtime's stdin
// is consumed already, and a memfd, unlike a pipe, takes any size without a
// reader, so nothing can block before the exec. The memfd's own descriptor is
// close-on-exec; fd 0 is not.
func stdinFrom(data []byte) error {
	fd, err := unix.MemfdCreate("devplumb-stdin", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("stdin for %s: memfd_create: %w", directName, err)
	}
	f := os.NewFile(uintptr(fd), "devplumb-stdin")
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("stdin for %s: %w", directName, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return fmt.Errorf("stdin for %s: %w", directName, err)
	}
	if err := unix.Dup3(fd, 0, 0); err != nil {
		return fmt.Errorf("stdin for %s: dup3: %w", directName, err)
	}
	return nil
}
