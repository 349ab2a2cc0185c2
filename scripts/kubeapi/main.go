// Command kubeapi gives `make demo-dra` a real kube-apiserver without kubectl: it runs
// etcd and kube-apiserver as the end-to-end tests do (e2e/kubeapi), applies manifests,
// and prints objects.
//
//	kubeapi serve DIR                         # until SIGTERM; DIR/kubeconfig when ready
//	kubeapi apply KUBECONFIG FILE...          # server-side apply of every YAML document
//	kubeapi get KUBECONFIG RESOURCE NAMESPACE NAME [FIELD.PATH]   # JSON of the object or a field
//	kubeapi list KUBECONFIG RESOURCE NAMESPACE [FIELD.PATH]       # the same for each object
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

const usage = `usage:
  kubeapi serve DIR
  kubeapi apply KUBECONFIG FILE...
  kubeapi get KUBECONFIG RESOURCE NAMESPACE NAME [FIELD.PATH]   (NAMESPACE "" for cluster objects)
  kubeapi list KUBECONFIG RESOURCE NAMESPACE [FIELD.PATH]
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch {
	case args[0] == "serve" && len(args) == 2:
		return serve(args[1])
	case args[0] == "apply" && len(args) >= 3:
		return apply(ctx, args[1], args[2:])
	case args[0] == "get" && (len(args) == 5 || len(args) == 6):
		return get(ctx, args[1], args[2], args[3], args[4], args[5:])
	case args[0] == "list" && (len(args) == 4 || len(args) == 5):
		return list(ctx, args[1], args[2], args[3], args[4:])
	}
	fmt.Fprint(os.Stderr, usage)
	os.Exit(2)
	return nil
}

// serve runs the API server until SIGTERM or SIGINT; DIR/kubeconfig (a copy, written
// last) tells a waiting script it is ready.
func serve(dir string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s, err := kubeapi.Start(filepath.Join(dir, "server"))
	if err != nil {
		return err
	}
	defer s.Close()
	b, err := os.ReadFile(s.Kubeconfig)
	if err == nil {
		tmp := filepath.Join(dir, ".kubeconfig")
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Join(dir, "kubeconfig"))
		}
	}
	if err != nil {
		return err
	}
	<-sig
	return nil
}
