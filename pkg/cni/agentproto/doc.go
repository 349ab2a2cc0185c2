// Package agentproto is the wire protocol between devplumb's CNI entry point
// (the binary the runtime executes) and its node agent (docs/architecture.md,
// "the node agent"). It is imported by the entry point, which must start as
// fast as the bridge plugin, so it links only the standard library,
// golang.org/x/sys/unix and the CNI library's types (imports_test.go).
//
// One CNI call is one connection on a root-only unix socket carrying three
// round trips, each one length-prefixed JSON request and one response:
//
//	hello   both sides' protocol version and build; another version, no
//	        answer within the entry point's bound, or no socket at all is
//	        ErrUnavailable, and the entry point does the call itself
//	prepare the CNI command, its CNI_* arguments and stdin; the agent claims
//	        the device and answers the delegate to run (or a CNI error to
//	        print, or nothing to run)
//	commit  the delegate's result or error; the agent finishes the call
//	        (records, network-status, claim status, Event) and answers what
//	        the entry point prints
//
// The delegate runs between prepare and commit in the entry point, so it keeps
// the runtime's environment, netns and timeout. Any failure after hello is
// ErrUnavailable too: the fallback (devplumb-direct) repairs a half-done call
// from the records, so the entry point never has to tell the cases apart.
package agentproto
