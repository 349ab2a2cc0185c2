// Command vswitch stands in for the host side of vhost-user in `make demo`: in
// vhost-user "client" mode the host (a virtual switch such as OVS-DPDK) creates
// one listening unix socket per port, and each socket is a device that
// netdev-dp advertises. It listens on the given paths until SIGTERM/SIGINT,
// then removes them. It speaks no vhost-user protocol: the demo only needs the
// sockets to exist.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: vswitch SOCKET...")
		os.Exit(2)
	}
	var ls []net.Listener
	for _, p := range os.Args[1:] {
		l, err := net.Listen("unix", p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vswitch: %v\n", err)
			closeAll(ls)
			os.Exit(1)
		}
		ls = append(ls, l)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	closeAll(ls) // closing a unix listener removes its socket file
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}
