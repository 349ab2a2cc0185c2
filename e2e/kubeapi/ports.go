package kubeapi

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports are picked below the kernel's ephemeral range: a port from there (what
// listening on :0 returns) is handed to every outgoing connection on the machine, and one
// may take it between the pick and the server's bind, or while kube-apiserver is stopped
// for a test and must come back on the same port.
const minPort = 10000

func freePort() (int, error) {
	lo := ephemeralLow()
	if lo-minPort >= 1000 {
		for range 200 {
			port := minPort + rand.IntN(lo-minPort)
			if bindable(port) {
				return port, nil
			}
		}
	}
	// No room below the range: let the kernel choose; the start retry covers a lost race.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubeapi: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the ephemeral range (32768 when unreadable).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

func bindable(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// FreePort is a free TCP port on 127.0.0.1 below the ephemeral range.
func FreePort() (int, error) { return freePort() }
