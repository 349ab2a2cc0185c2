// Package protocol implements the 2017 Container Device Interface draft
// (version 0.0.2, "device binaries"): CNI-like binaries that a caller runs
// with CDI_COMMAND=VERSION|INFO|ADD|DEL and CDI_* variables in the
// environment and the config JSON on stdin, and that answer JSON on stdout
// with an exit status. Configs live in /etc/cdi/<resource-type>.d/*.conf,
// binaries in /opt/cdi/bin.
//
// Both sides are here: Handler serves the commands for a Plugin (checking
// every input by the draft's ABNF and rules before the plugin runs), and
// Binary runs a binary with a timeout and refuses replies that break the
// draft. Discover finds configs; it reads only <resource-type>.d/*.conf,
// while today's CDI library (tags.cncf.io/container-device-interface) reads
// only the *.json and *.yaml files directly in /etc/cdi, so the two readers
// of that directory never see each other's files.
//
// # Where the draft contradicts itself, and what this package does
//
//   - Error keys: the text says "error" and "message", the examples print
//     "code" and "msg". Error replies carry both pairs; either is accepted.
//   - Versions: the example configs and replies say 0.0.1, the VERSION
//     example says 0.0.2 with [0.0.1, 0.0.2], and the first error example
//     answers an unsupported CDI_VERSION with 0.0.1 from the same binary. An
//     error reply uses the caller's version when supported, else the
//     config's, else the newest; a VERSION reply the newest.
//   - CDI_VERSION is required for every command but VERSION, yet the INFO
//     examples and the first error example omit it (and the latter omits
//     CDI_COMMAND). A missing CDI_VERSION is error 1; the version is checked
//     before the command, which reproduces the first error example.
//   - ADD example 3 asks for gpu-memory:2048Mi although amounts MUST be
//     integers, while the INFO example of the same binary advertises
//     gpu-memory. Resource-specs are checked before amounts, so the example's
//     answer (error 4, "Unsupported resource-spec: gpu-memory") comes out for
//     a plugin that takes only "gpu"; a non-integer amount is error 4 too.
//   - DEL "MUST NOT fail" yet has a failure example: DEL always exits 0 and
//     may print an error reply (code 5 for an unknown request ID) for the log.
//   - num_system_reserved is "the number of TTYs reserved" and "the number of
//     the first TTY that could be used", which differ by one; with 12
//     reserved the ADD example hands out tty13. cdi-devnodes reserves the
//     first num_system_reserved matching nodes, so the example holds for
//     nodes numbered from 1 (as VTs are; tty0 is the current console).
//   - Config files are named <binary-name>.conf in one place and
//     <plugin-name>.conf in another, and the example tty.d/generic.conf names
//     plugin "generic-tty": any *.conf is read, its "plugin" names the binary.
//   - The drm example's text calls its key want_device_types, the JSON says
//     want_device_nodes; args are opaque here, so nothing depends on it.
//   - The draft gives no code for a missing or malformed request ID, nor for
//     a malformed config: they are 5 and 2 (4 for a config type that is no
//     resource-type, or that does not match its folder).
//   - An INFO reply is a flat object, so a resource-type named "error" or
//     "code" would look like an error reply: replies are told apart by the
//     exit status, not by their keys.
package protocol
