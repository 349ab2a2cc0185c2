// Package failpoint lets tests kill a process at a named step, to prove that
// what the next run does (DEL, ADD then DEL, a restart) leaves nothing.
//
// Hit(name) does nothing in a normal build: the function is empty and the
// compiler removes the call. Built with `-tags failpoints`, Hit kills the
// process with SIGKILL, as a node crash or an OOM kill would, when the
// environment variable DEVPLUMB_FAILPOINT names that step. Release builds
// never carry the tag.
package failpoint

// Env names the step to die at (builds with the failpoints tag only).
const Env = "DEVPLUMB_FAILPOINT"
