// Package guest holds the tests e2e/vm runs inside its VM (build tag vmguest): they
// need the guest's real PCI devices and run the binaries in $DEVPLUMB_VM_BIN.
package guest
