package resources

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/devplumb/devplumb/devinfo"
)

// OwnDPDir gives the device-info dp/ directory the mode netdev-dp needs: the NAD client
// library (which Multus and the SR-IOV device plugin use) creates the device-info
// directories with mode 000, which netdev-dp's DaemonSet, without CAP_DAC_OVERRIDE,
// could not list or write. dp/ is the device plugins' directory; netdev-dp is one.
func OwnDPDir(devinfoDir string) error {
	dp := filepath.Join(devinfo.NewStore(devinfoDir).Dir, devinfo.KindDP)
	st, err := os.Stat(dp)
	if errors.Is(err, os.ErrNotExist) {
		return nil // made with the right mode on the first write
	}
	if err != nil {
		return fmt.Errorf("device-info directory: %w", err)
	}
	if st.Mode().Perm() != 0o755 {
		if err := os.Chmod(dp, 0o755); err != nil {
			return fmt.Errorf("device-info directory %s has mode %04o and cannot be given 0755: %w", dp, st.Mode().Perm(), err)
		}
	}
	return nil
}
