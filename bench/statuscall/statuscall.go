// Package statuscall is how bench/passthrough hands a call's outcome to make bench's
// status daemon (bench/statusd.go): one JSON object per connection, one line of answer
// back, "ok" or the error. It imports nothing beyond the standard library, so the
// pass-through stays the least a Go meta-plugin costs.
package statuscall

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
)

// Call is one CNI call's outcome for the daemon to write to the pod.
type Call struct {
	Add       bool            `json:"add"`
	Namespace string          `json:"namespace"`
	Pod       string          `json:"pod"`
	Network   string          `json:"network"`
	Result    json.RawMessage `json:"result,omitempty"` // ADD's CNI result
	// Claim is the DRA claim whose status.devices[] entry the daemon writes as well
	// (nil: none), its device given, not looked up.
	Claim *Claim `json:"claim,omitempty"`
}

// Claim is a ResourceClaim's allocated device.
type Claim struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
}

// Ask sends c to the daemon on socket and waits for its answer.
func Ask(socket string, c Call) error {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return fmt.Errorf("status daemon: %w", err)
	}
	defer conn.Close()
	if err := json.NewEncoder(conn).Encode(c); err != nil {
		return fmt.Errorf("status daemon: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("status daemon's answer: %w", err)
	}
	if line != "ok\n" {
		return fmt.Errorf("status daemon: %s", line)
	}
	return nil
}
