package bench

// For a network whose config says "agentRecords", the idle agent (idleagent.go) also
// does what no agent that keeps devplumb's promises can skip: it asks the kubelet for
// the pod's devices, gives the attachment one that no record holds (the one-device
// rule), and keeps a record on disk that says, at every step, what a crash left (crash
// safety), as devplumb's records do. ADD's prepare: the PodResources Get; under the
// state lock, the records read and the attachment's record written before the
// delegates run; the device's device-info file copied to the attachment's. ADD's
// commit: the record rewritten as completed, with the result. DEL's prepare: the record
// read. DEL's commit, under the lock: the record rewritten as undone, the device-info
// file removed, the record removed. Each write is a temp file renamed (atomicfile), on
// the same disk as devplumb's state. Nothing else: no config beyond its name and these
// paths, no directory checks, no timings, no logs. Its P1 row is the least an
// agent-based meta-plugin keeping those promises costs here.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/atomicfile"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/leftover"
	"github.com/devplumb/devplumb/podresources"
)

// recordsConf is a network config's "agentRecords": where the records and the
// device-info files are, and whom to ask for the pod's devices of which resource.
type recordsConf struct {
	StateDir      string `json:"stateDir"`
	DeviceInfoDir string `json:"deviceInfoDir"`
	PodResources  string `json:"podResources"`
	Resource      string `json:"resource"`
}

// record is what the least keeps of an attachment.
type record struct {
	Pod      string          `json:"pod"`
	Device   string          `json:"device"`
	CNIFile  string          `json:"cniFile"`
	Complete bool            `json:"complete"`
	Result   json.RawMessage `json:"result,omitempty"`
}

// recordKeeper keeps the records of one state directory: its lock file stays open,
// and its kubelet client warm, as an agent's would.
type recordKeeper struct {
	conf recordsConf
	lock int
	pr   *podresources.Client
}

// keepers are the idle agent's record keepers, one per state directory.
type keepers struct {
	mu    sync.Mutex
	byDir map[string]*recordKeeper
}

func (k *keepers) of(c recordsConf) (*recordKeeper, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r := k.byDir[c.StateDir]; r != nil {
		return r, nil
	}
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("idle agent records: %w", err)
	}
	fd, err := unix.Open(filepath.Join(c.StateDir, "lock"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("idle agent records: lock: %w", err)
	}
	pr, err := podresources.New(c.PodResources)
	if err != nil {
		unix.Close(fd) //nolint:errcheck // not used
		return nil, fmt.Errorf("idle agent records: %w", err)
	}
	r := &recordKeeper{conf: c, lock: fd, pr: pr}
	k.byDir[c.StateDir] = r
	return r, nil
}

func (k *keepers) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.byDir {
		r.pr.Close()
		unix.Close(r.lock) //nolint:errcheck // nothing written through it
	}
	k.byDir = map[string]*recordKeeper{}
}

// prepare is the prepare's record work for attachment (the record's file name).
func (r *recordKeeper) prepare(ctx context.Context, p *agentproto.Prepare, attachment string) error {
	if p.Command == agentproto.CmdDel {
		_, err := r.read(attachment)
		return err
	}
	ns, name, err := podOf(p.Args)
	if err != nil {
		return err
	}
	pod, err := r.pr.Get(ctx, ns, name)
	if err != nil {
		return fmt.Errorf("idle agent records: %w", err)
	}
	var dev string
	err = r.locked(func() error {
		if dev, err = r.free(leftover.DevicesByResource(pod)[r.conf.Resource], attachment); err != nil {
			return err
		}
		return r.write(attachment, &record{Pod: ns + "/" + name, Device: dev, CNIFile: r.cniFile(attachment)})
	})
	if err != nil {
		return err
	}
	return r.copyDeviceInfo(dev, r.cniFile(attachment))
}

// commit is the commit's record work: a successful ADD's completed record, or the
// retirement of a DEL's (or a failed ADD's).
func (r *recordKeeper) commit(added bool, attachment string, result []byte) error {
	return r.locked(func() error {
		rec, err := r.read(attachment)
		if err != nil {
			return err
		}
		if added {
			rec.Complete, rec.Result = true, result
			return r.write(attachment, rec)
		}
		rec.Complete = false
		if err := r.write(attachment, rec); err != nil {
			return err
		}
		if err := os.Remove(rec.CNIFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("idle agent records: %w", err)
		}
		return os.Remove(r.path(attachment))
	})
}

// free is the first of devs no other attachment's record holds; the caller holds
// the lock.
func (r *recordKeeper) free(devs []string, attachment string) (string, error) {
	entries, err := os.ReadDir(r.conf.StateDir)
	if err != nil {
		return "", fmt.Errorf("idle agent records: %w", err)
	}
	held := map[string]bool{}
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".") && name != attachment+".json" {
			rec, err := r.read(strings.TrimSuffix(name, ".json"))
			if err != nil {
				return "", err
			}
			held[rec.Device] = true
		}
	}
	for _, d := range devs {
		if !held[d] {
			return d, nil
		}
	}
	return "", fmt.Errorf("idle agent records: no free device among %q", devs)
}

func (r *recordKeeper) locked(fn func() error) error {
	if err := unix.Flock(r.lock, unix.LOCK_EX); err != nil {
		return fmt.Errorf("idle agent records: lock: %w", err)
	}
	defer unix.Flock(r.lock, unix.LOCK_UN) //nolint:errcheck // closing would unlock too
	return fn()
}

func (r *recordKeeper) path(attachment string) string {
	return filepath.Join(r.conf.StateDir, attachment+".json")
}

func (r *recordKeeper) cniFile(attachment string) string {
	return filepath.Join(r.conf.DeviceInfoDir, devinfo.KindCNI, "idle-"+attachment)
}

func (r *recordKeeper) read(attachment string) (*record, error) {
	data, err := os.ReadFile(r.path(attachment))
	if err != nil {
		return nil, fmt.Errorf("idle agent records: %w", err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("idle agent records: %s: %w", attachment, err)
	}
	return &rec, nil
}

func (r *recordKeeper) write(attachment string, rec *record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("idle agent records: %w", err)
	}
	return atomicfile.WriteFileVolatile(r.path(attachment), data, 0o600)
}

// copyDeviceInfo copies the device plugin's device-info file of dev to the
// attachment's, which the pod's apps read: written as devplumb writes it.
func (r *recordKeeper) copyDeviceInfo(dev, cniFile string) error {
	dp, err := devinfo.NewStore(r.conf.DeviceInfoDir).DPPath(r.conf.Resource, dev)
	if err != nil {
		return fmt.Errorf("idle agent records: %w", err)
	}
	data, err := os.ReadFile(dp)
	if err != nil {
		return fmt.Errorf("idle agent records: %w", err)
	}
	return atomicfile.WriteFile(cniFile, data, 0o644)
}

// podOf is the pod CNI_ARGS names.
func podOf(args string) (ns, name string, err error) {
	var pod struct {
		types.CommonArgs
		K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
		K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
	}
	if err := types.LoadArgs(args, &pod); err != nil {
		return "", "", fmt.Errorf("idle agent: CNI_ARGS: %w", err)
	}
	return string(pod.K8S_POD_NAMESPACE), string(pod.K8S_POD_NAME), nil
}
