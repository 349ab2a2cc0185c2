// Package agentproto is the wire protocol between devplumb's CNI entry point
// (the binary the runtime executes) and its node agent (docs/architecture.md,
// "the node agent"). It is imported by the entry point, which must start as
// fast as the bridge plugin, so it links only the standard library,
// golang.org/x/sys/unix and the CNI library's types (imports_test.go).
//
// One CNI call is one connection on a root-only unix socket carrying three
// round trips (four after a failed commit), each one length-prefixed JSON
// request and one response; a DEL sends its prepare with the hello
// (DialDel), two round trips, as a DEL's prepare changes nothing an agent
// reading it late could get wrong. An ADD sends its prepare's lookahead
// with the hello (DialAdd), a request that is not answered: the agent may
// start what the prepare will read, and takes the device only on the
// prepare, which the entry point sends once the hello is answered:
//
//	hello   both sides' protocol version and build; another version, no
//	        answer within the entry point's bound, or no socket at all is
//	        ErrUnavailable, and the entry point does the call itself
//	lookahead (an ADD's, with the hello; not answered) the prepare to come
//	prepare the CNI command, its CNI_* arguments and stdin; the agent claims
//	        the device and answers the delegate to run (or a CNI error to
//	        print, or nothing to run)
//	commit  the delegate's result or error; the agent finishes the call
//	        (records, network-status, claim status, Event) and answers what
//	        the entry point prints
//	rollback only after a commit answered with Undo: the delegates' DEL ran
//
// The client dials only a socket whose directory is root's and not
// writable by group or others, and talks only to a peer whose SO_PEERCRED
// uid is 0; the server serves only uid 0, at most MaxConns connections, one
// prepare per connection, each frame within FrameWait of its first byte,
// with memory for a frame as its bytes arrive, out of a budget shared by
// all connections (MaxInflight). A call prepared on a connection is that
// connection's: only it may commit or roll it back, and the handler's
// context (ConnOf) ends with it, when the agent gives the call up.
//
// What the entry point must do with each answer:
//
//   - Any client error (ErrUnavailable) before the delegates ran: exec
//     devplumb-direct with the same arguments, environment and stdin. The
//     agent of pkg/cni/agent answers CHECK so, as it runs CHECK not at all.
//     An untrusted socket or listener is ErrUnavailable too: the entry
//     point does not talk to it. ErrTooLarge (a config too large for a
//     frame) is not: print it as a CNI error (code 7), do not fall back.
//   - PrepareAnswer with Error: print it, exit non-zero. With Result: print
//     it, exit 0 (a repeated ADD). With none of Delegate, Error, Result:
//     print nothing, exit 0.
//   - PrepareAnswer with Delegate: check that it is the call's (CacheDir the
//     node config's <stateDir>/libcni/<network name>; Runtime, when set,
//     with the call's ContainerID and IfName and its netns or none); if it
//     is not, print a CNI error naming the field, run nothing and do not
//     fall back. Then run the command (ADD or DEL) on the delegates with
//     libcni: Delegate.ConfList, a RuntimeConf of
//     Delegate.Runtime (or, unset, its own CNI_* arguments) and
//     Delegate.CapabilityArgs, CacheDir Delegate.CacheDir when set, the
//     plugins found on its CNI_PATH, its own environment with
//     DEVPLUMB_DEPTH one higher than it inherited (an entry point started
//     with DEVPLUMB_DEPTH >= 1 is devplumb's own delegate and must not ask
//     the agent: it execs devplumb-direct, which refuses the call). A failed
//     delegate ADD is undone by the entry point at once (libcni's DEL of the
//     same list and runtime), before the Commit carrying its error: the
//     agent frees the device on that Commit.
//   - Then Commit with the delegates' result (ADD: its JSON, as libcni
//     returns it) or error (a *types.Error; any other error as code 999
//     with its text), and print the answer: Result and exit 0, or Error and
//     exit non-zero.
//   - CommitAnswer with Undo: the ADD failed after its delegates succeeded.
//     Run the delegates' DEL (same Delegate, same runtime and cache), send
//     Rollback with that DEL's error if it failed (the agent frees the
//     device either way, as devplumb-direct does after its own undo), then
//     print the commit's Error and exit non-zero whatever Rollback answers.
//
// The delegate runs between prepare and commit in the entry point, so it keeps
// the runtime's environment, netns and timeout. A connection lost after hello
// is ErrUnavailable too: the fallback (devplumb-direct) repairs a half-done
// call from the records, so the entry point never has to tell the cases
// apart. An answer too large for a frame is answered as the CNI error it is
// (code 7), never as a closed connection, which would mean a fallback.
package agentproto
