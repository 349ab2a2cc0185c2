package deviceplugin

// Event is something a plugin did that an operator counts (metrics).
type Event string

// The events a Server reports to its Observer.
const (
	EventRegistered     Event = "registered"      // the kubelet accepted a registration
	EventRegisterFailed Event = "register_failed" // one registration attempt failed
	EventKubeletRestart Event = "kubelet_restart" // registered with a new kubelet.sock after another one
	EventAllocated      Event = "allocated"       // one container's devices were allocated
	EventAllocateFailed Event = "allocate_failed" // an Allocate call was refused or failed
)

// Observer hears a Server's events. It is called from gRPC handlers and
// Run's goroutine, so it must be safe for concurrent use and must not block.
type Observer interface {
	Observe(resource string, ev Event)
}

func (s *Server) observe(ev Event) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Observe(s.cfg.ResourceName, ev)
	}
}

// Registered tells whether the plugin is registered with the kubelet that
// is there now: false before the first registration, after the kubelet's
// socket went away, and while the plugin directory is missing. A readiness
// probe asks this.
func (s *Server) Registered() bool { return s.live.Load() }
