package plugin

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/cni/shape"
)

// pciNetDir is where a PCI function's netdevs are named: the parent of a
// share given by its PCI address is the first of them.
var pciNetDir = "/sys/bus/pci/devices"

// delegateList is the delegates' config for the attachment rec records. A
// share of a shared device (its claim names a share ID) is a sub-interface
// of its parent: the NAD's first delegate gets the parent's netdev as
// "master" (docs/sharing.md).
func (c *call) delegateList(rec *attachment.Record) (*libcni.NetworkConfigList, *types.Error) {
	if rec.Claim == nil || rec.Claim.ShareID == "" {
		if netshare.IsDeviceID(rec.DeviceID) {
			return nil, cniError(ErrNoDevice, fmt.Sprintf("device %s is a share of a shared device: devplumb reads a share from "+
				"its ResourceClaim: name the pod's claim in \"resourceClaim\" (and set \"kubeconfig\")", rec.DeviceID), nil)
		}
		return c.buildList(rec.DeviceID)
	}
	if err := shape.Check(*shareSpec(rec)); err != nil {
		return nil, cniError(ErrShape, err.Error(), nil)
	}
	parent := netshare.ParentID(rec.DeviceID, rec.Claim.ShareID)
	master, err := parentNetdev(parent)
	if err != nil {
		return nil, cniError(ErrNoDevice, fmt.Sprintf("%s: the share's parent device %s", rec.Claim, parent), err)
	}
	list, err := delegate.BuildShareList(c.conf, master)
	if err != nil {
		return nil, cniError(types.ErrInvalidNetworkConfig, `invalid delegate config: fix "delegate" (or "delegates")`, err)
	}
	return list, nil
}

// parentNetdev is the netdev of a share's parent: the ID itself for a
// netdev, the PCI function's first netdev for a PCI address.
func parentNetdev(id string) (string, error) {
	if !delegate.IsPCIAddress(id) {
		return id, nil
	}
	entries, err := os.ReadDir(filepath.Join(pciNetDir, id, "net"))
	if err != nil || len(entries) == 0 {
		return "", fmt.Errorf("PCI function %s has no netdev to put the share on (bound to vfio-pci?): %v", id, err)
	}
	name := entries[0].Name()
	if strings.ContainsAny(name, "/\x00") {
		return "", fmt.Errorf("PCI function %s: netdev name %q", id, name)
	}
	return name, nil
}

// shareSpec is how the attachment rec records is shaped: a share at its
// consumed bandwidth; nil for a whole device, or no record (a DEL without
// state: a share's ifb then goes with the pod's netns).
func shareSpec(rec *attachment.Record) *shape.Spec {
	if rec == nil || rec.Claim == nil || rec.Claim.ShareID == "" {
		return nil
	}
	return &shape.Spec{Share: rec.Claim.String(), Rate: uint64(max(rec.Claim.Bandwidth, 0))}
}

// shapeShare is what the runner of a share's delegates does once their ADD
// succeeded: the share's rate on its interface (pkg/cni/shape). Its error
// (code ErrShape) is the runner's to undo, as a failed delegate ADD.
func shapeShare(spec *shape.Spec, rt *libcni.RuntimeConf) error {
	if spec == nil {
		return nil
	}
	if err := shape.Apply(rt.NetNS, rt.IfName, *spec); err != nil {
		return cniError(ErrShape, err.Error(), nil)
	}
	return nil
}

// unshapeShare removes a share's ifb after its delegates' DEL (they took
// the interface and its qdiscs); a failure leaves an ifb with the pod's
// netns, which a later ADD of the interface replaces: logged, never DEL's
// error.
func unshapeShare(spec *shape.Spec, rt *libcni.RuntimeConf, log *slog.Logger) {
	if spec == nil {
		return
	}
	if err := shape.Remove(rt.NetNS, rt.IfName); err != nil {
		log.Warn("leaving the share's ifb to its netns", "share", spec.Share, "err", err)
	}
}

// checkShape is CHECK of a share: its interface is still shaped to its
// rate both ways (shape.Read), as ADD left it.
func checkShape(spec *shape.Spec, rt *libcni.RuntimeConf) *types.Error {
	if spec == nil {
		return nil
	}
	got, err := shape.Read(rt.NetNS, rt.IfName)
	if err == nil && (got.Send != spec.Rate || got.Receive != spec.Rate) {
		err = fmt.Errorf("its tbfs hold %d bit/s sent and %d received", got.Send, got.Receive)
	}
	if err != nil {
		return cniError(ErrShape, fmt.Sprintf("%s: %s is not shaped to the share's bandwidth %d bit/s: run ADD again",
			spec.Share, rt.IfName, spec.Rate), err)
	}
	return nil
}

// shapeError is a runner's shaping error as CommitAdd reports it: as it
// is (a delegate's error takes delegateError's wording instead).
func shapeError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) && te.Code == ErrShape {
		return te
	}
	return nil
}
