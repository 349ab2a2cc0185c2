package testenv

import (
	"io"
	"os"
	"testing"
)

// Stdout runs f with os.Stdout going to a pipe and returns what it printed
// (the CNI result a plugin's ADD prints) and f's error. f's output must fit
// the pipe's buffer (64 KiB): nothing reads it until f returns.
func Stdout(t testing.TB, f func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	saved := os.Stdout
	os.Stdout = w
	ferr := f()
	os.Stdout = saved
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), ferr
}
