package devnodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
	"golang.org/x/sys/unix"
)

// TestDraftTTYExamples runs the draft's generic TTY examples on the built
// binary: 44 nodes numbered from 1 (as VTs are), 12 reserved. The config
// is the draft's tty.d/generic.conf plus the glob, state and sysfs paths
// that keep the test in temp dirs, so the paths print with their prefix.
func TestDraftTTYExamples(t *testing.T) {
	f := newFixture(t, 44, 12)
	// INFO example 2
	out, code := f.run("CDI_VERSION=0.0.1 CDI_COMMAND=INFO")
	jsonEq(t, out, `{"cdiVersion": "0.0.1", "tty": 32}`)
	if code != 0 {
		t.Errorf("INFO exit %d", code)
	}
	// ADD example 2
	out, code = f.run("CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:3 CDI_REQUEST_ID=7890")
	jsonEq(t, out, fmt.Sprintf(`{"cdiVersion": "0.0.1", "devices": [%q, %q, %q]}`, f.dev(13), f.dev(14), f.dev(15)))
	if code != 0 {
		t.Errorf("ADD exit %d", code)
	}
	if n := f.info(); n != 29 {
		t.Errorf("INFO after ADD tty:3: %d free, want 29", n)
	}
	// DEL examples: known ID silent, unknown ID error 5, both exit 0
	if out, code = f.run("CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=7890"); out != "" || code != 0 {
		t.Errorf("DEL 7890: %q exit %d", out, code)
	}
	out, code = f.run("CDI_VERSION=0.0.1 CDI_COMMAND=DEL CDI_REQUEST_ID=3456")
	jsonEq(t, out, `{"cdiVersion": "0.0.1", "code": 5, "msg": "Unknown request ID", "error": 5, "message": "Unknown request ID", "details": "request ID 3456 holds no devices"}`)
	if code != 0 {
		t.Errorf("DEL 3456 exit %d", code)
	}
	if n := f.info(); n != 32 {
		t.Errorf("INFO after DEL: %d, want 32", n)
	}
	// VERSION example
	out, code = f.run("CDI_COMMAND=VERSION")
	jsonEq(t, out, `{"cdiVersion": "0.0.2", "supportedVersions": ["0.0.1", "0.0.2"]}`)
	if code != 0 {
		t.Errorf("VERSION exit %d", code)
	}
}

// TestBadCallsChangeNothing: malformed calls and requests that cannot be
// met are errors with their codes and leave the state file as it was.
func TestBadCallsChangeNothing(t *testing.T) {
	f := newFixture(t, 10, 2)
	if _, code := f.run("CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:2 CDI_REQUEST_ID=held"); code != 0 {
		t.Fatal("setup ADD failed")
	}
	before := f.stateBytes()
	for _, c := range []struct {
		env  string
		code int
	}{
		{"CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=a1", 1},
		{"CDI_VERSION=0.999 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=a1", 1},
		{"CDI_VERSION=0.0.2 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=a1", 2}, // config says 0.0.1
		{"CDI_VERSION=0.0.1 CDI_COMMAND=RESET", 3},
		{"CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:one CDI_REQUEST_ID=a1", 4},
		{"CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty=1 CDI_REQUEST_ID=a1", 4},
		{"CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=gpu:1 CDI_REQUEST_ID=a1", 4},
		{"CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=a.1", 5},
		{"CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:7 CDI_REQUEST_ID=a1", CodeNotEnough},
		{"CDI_VERSION=0.0.1 CDI_COMMAND=ADD CDI_REQUEST=tty:1 CDI_REQUEST_ID=held", CodeIDInUse},
	} {
		out, exit := f.run(c.env)
		var e protocol.Error
		if err := e.UnmarshalJSON([]byte(out)); err != nil || e.Code != c.code || exit != 1 {
			t.Errorf("%s: %q exit %d, want code %d exit 1", c.env, out, exit, c.code)
		}
	}
	if after := f.stateBytes(); string(after) != string(before) {
		t.Errorf("state changed by bad calls:\n%s\n->\n%s", before, after)
	}
	if n := f.info(); n != 6 {
		t.Errorf("INFO %d, want 6", n)
	}
}

// TestBadArgs: args the binary cannot use are error 2.
func TestBadArgs(t *testing.T) {
	f := newFixture(t, 2, 0)
	for _, args := range []string{`{"glob": "relative*"}`, `{"num_system_reserved": -1}`, `{"globs": "/dev/x"}`, `{"state_dir": "rel"}`} {
		f.conf = []byte(`{"cdiVersion": "0.0.1", "name": "x", "type": "tty", "plugin": "cdi-devnodes", "args": ` + args + `}`)
		out, exit := f.run("CDI_VERSION=0.0.1 CDI_COMMAND=INFO")
		if !strings.Contains(out, `"code":2`) || exit != 1 {
			t.Errorf("%s: %q exit %d", args, out, exit)
		}
	}
}

// TestConcurrentAddsNeverShare runs many ADD processes at once for more
// nodes than there are: no node is handed out twice, every success is in
// the state, every failure is "not enough" and claimed nothing.
func TestConcurrentAddsNeverShare(t *testing.T) {
	f := newFixture(t, 34, 2) // 32 free
	const procs = 24          // each asks for 2: 48 > 32
	var mu sync.Mutex
	got := map[string][]string{}
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("req%d", i)
			r, err := f.caller.Add(context.Background(), "0.0.1", []protocol.Amount{{Spec: "tty", Amount: 2}}, id, nil)
			var e *protocol.Error
			switch {
			case err == nil:
				mu.Lock()
				got[id] = r.Devices
				mu.Unlock()
			case errors.As(err, &e) && e.Code == CodeNotEnough:
			default:
				t.Errorf("%s: %v", id, err)
			}
		}()
	}
	wg.Wait()
	owner := map[string]string{}
	for id, devs := range got {
		if len(devs) != 2 {
			t.Errorf("%s got %v", id, devs)
		}
		for _, d := range devs {
			if other, dup := owner[d]; dup {
				t.Errorf("%s handed to %s and %s", d, other, id)
			}
			owner[d] = id
		}
	}
	if len(got) != 16 {
		t.Errorf("%d ADDs succeeded, want 16 (32 free / 2)", len(got))
	}
	st := f.state()
	for id, devs := range got {
		if !reflect.DeepEqual(st.Requests[id].Devices, devs) {
			t.Errorf("state of %s: %v, reply %v", id, st.Requests[id].Devices, devs)
		}
	}
	if len(st.Requests) != len(got) || f.info() != 0 {
		t.Errorf("state has %d requests, INFO %d", len(st.Requests), f.info())
	}
}

// TestCrashBeforeClaim: an ADD killed while it waits for the state lock
// claims nothing; DEL of its request ID is error 5 for the log and exit 0.
func TestCrashBeforeClaim(t *testing.T) {
	f := newFixture(t, 6, 0)
	f.info() // creates the state dir and lock file
	lock, err := os.OpenFile(StatePath(f.states, "tty")+".lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(f.bin)
	cmd.Env = []string{"CDI_VERSION=0.0.1", "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID=crash1"}
	cmd.Stdin = strings.NewReader(string(f.conf))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	logged, err := f.caller.Del(context.Background(), "0.0.1", "crash1")
	if err != nil || logged == nil || logged.Code != protocol.ErrCodeRequestID {
		t.Errorf("DEL after crash: %v %v", logged, err)
	}
	if n := f.info(); n != 6 || len(f.state().Requests) != 0 {
		t.Errorf("after crash and DEL: %d free, state %+v", n, f.state())
	}
}

// TestCrashAfterClaim: an ADD that dies after its claim is written but
// before its reply is out (here: SIGPIPE, its stdout closed) leaves the
// claim under its request ID, and DEL of that ID returns every node.
func TestCrashAfterClaim(t *testing.T) {
	f := newFixture(t, 6, 0)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // no reader: the reply write kills the process
	cmd := exec.Command(f.bin)
	cmd.Env = []string{"CDI_VERSION=0.0.1", "CDI_COMMAND=ADD", "CDI_REQUEST=tty:2", "CDI_REQUEST_ID=crash2"}
	cmd.Stdin = strings.NewReader(string(f.conf))
	cmd.Stdout = w
	err = cmd.Run()
	w.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGPIPE {
		t.Fatalf("ADD with a closed stdout: %v, want death by SIGPIPE", err)
	}
	if claim := f.state().Requests["crash2"]; len(claim.Devices) != 2 {
		t.Fatalf("claim of the crashed ADD: %+v", claim)
	}
	if logged, err := f.caller.Del(context.Background(), "0.0.1", "crash2"); err != nil || logged != nil {
		t.Errorf("DEL: %v %v", logged, err)
	}
	if n := f.info(); n != 6 || len(f.state().Requests) != 0 {
		t.Errorf("after DEL: %d free, state %+v", n, f.state())
	}
}

// TestNUMALocality: with locality asked, nodes on those NUMA nodes come
// first; the reply names the NUMA nodes of what it handed out.
func TestNUMALocality(t *testing.T) {
	f := newFixture(t, 8, 0)
	for n := 1; n <= 4; n++ {
		f.setNUMA(n, 0)
	}
	for n := 5; n <= 8; n++ {
		f.setNUMA(n, 1)
	}
	ctx := context.Background()
	add := func(id string, amount int64, numa []int) *protocol.AddReply {
		r, err := f.caller.Add(ctx, "0.0.1", []protocol.Amount{{Spec: "tty", Amount: amount}}, id, numa)
		if err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		return r
	}
	if r := add("near1", 2, []int{1}); !slices.Equal(r.Devices, []string{f.dev(5), f.dev(6)}) || !slices.Equal(r.NUMALocality, []int{1}) {
		t.Errorf("locality 1: %+v", r)
	}
	if r := add("any", 1, nil); !slices.Equal(r.Devices, []string{f.dev(1)}) || !slices.Equal(r.NUMALocality, []int{0}) {
		t.Errorf("no locality: %+v", r)
	}
	// Two left on node 1, three wanted: spills over to node 0.
	if r := add("spill", 3, []int{1}); !slices.Equal(r.Devices, []string{f.dev(7), f.dev(8), f.dev(2)}) || !slices.Equal(r.NUMALocality, []int{0, 1}) {
		t.Errorf("spill: %+v", r)
	}
}

func TestNaturalOrder(t *testing.T) {
	in := []string{"/dev/tty10", "/dev/tty2", "/dev/ttyS0", "/dev/tty1", "/dev/tty02", "/dev/tty"}
	slices.SortFunc(in, naturalCompare)
	want := []string{"/dev/tty", "/dev/tty1", "/dev/tty2", "/dev/tty02", "/dev/tty10", "/dev/ttyS0"}
	if !slices.Equal(in, want) {
		t.Errorf("%v, want %v", in, want)
	}
}
