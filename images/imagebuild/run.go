package imagebuild

import (
	"fmt"
	"os/exec"
)

// runList is `busybox --list`: the applets this busybox has.
func runList(bin string) (string, error) {
	out, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return "", fmt.Errorf("busybox: %s --list: %w", bin, err)
	}
	return string(out), nil
}
