package bench

// What P10's tools counted: the agent's instructions from callgrind_control's dumps, a
// callgrind or cachegrind file's total, and a plugin call's syscalls and round trips to the
// agent from strace -ff's files.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// callgrindControl runs callgrind_control with flag on the agent's process.
func callgrindControl(flag string, a *agentProc) error {
	out, err := exec.Command("callgrind_control", flag, strconv.Itoa(a.cmd.Process.Pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", flag, err, out)
	}
	return nil
}

// agentInstructions dumps the agent's counters (since the last zeroing) and reads them.
func (v *costVariant) agentInstructions() (int64, error) {
	dir := filepath.Join(filepath.Dir(v.agent.log), "..")
	before, _ := filepath.Glob(filepath.Join(dir, "agent.*.cg*"))
	if err := callgrindControl("-d", v.agent); err != nil {
		return 0, err
	}
	after, _ := filepath.Glob(filepath.Join(dir, "agent.*.cg*"))
	for _, f := range after {
		if !slices.Contains(before, f) {
			return callgrindTotal(f)
		}
	}
	return 0, fmt.Errorf("callgrind_control -d left no new dump in %s", dir)
}

var callgrindTotals = regexp.MustCompile(`(?m)^(?:summary|totals): (\d+)`)

// callgrindTotal is the instructions a callgrind output file counts.
func callgrindTotal(path string) (int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			if m := callgrindTotals.FindSubmatch(b); m != nil {
				return strconv.ParseInt(string(m[1]), 10, 64)
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("callgrind output %s: no totals (%v)", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// straceCounts reads strace -ff's files of one plugin call: the syscalls of the plugin's
// own threads (not those of the delegates it started: a file with another program's
// execve), and its writes to the agent's socket (one per request: the round trips).
func straceCounts(prefix string, a *agentProc) (syscalls, trips int, err error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return 0, 0, fmt.Errorf("strace output %s.*: none (%v)", prefix, err)
	}
	var lines [][]string
	plugin := ""
	for _, f := range files {
		ls, err := readLines(f)
		if err != nil {
			return 0, 0, err
		}
		for i, l := range ls {
			ls[i] = straceStamp.ReplaceAllString(l, "")
		}
		if len(ls) > 0 && strings.HasPrefix(ls[0], "execve(") && plugin == "" && !strings.Contains(ls[0], "clone") {
			plugin = strings.SplitN(ls[0], "\"", 3)[1]
		}
		lines = append(lines, ls)
	}
	sockFD := ""
	for _, ls := range lines {
		if exe := execOf(ls); exe != "" && exe != plugin {
			continue // a delegate
		}
		for _, l := range ls {
			if strings.HasPrefix(l, "+++") || strings.HasPrefix(l, "---") || strings.HasPrefix(l, "<...") {
				continue
			}
			syscalls++
			if a != nil && strings.HasPrefix(l, "connect(") && strings.Contains(l, a.socket) {
				sockFD = strings.TrimPrefix(strings.SplitN(l, ",", 2)[0], "connect(")
			}
		}
	}
	if sockFD != "" {
		for _, ls := range lines {
			if exe := execOf(ls); exe != "" && exe != plugin {
				continue
			}
			for _, l := range ls {
				if strings.HasPrefix(l, "write("+sockFD+",") {
					trips++
				}
			}
		}
	}
	return syscalls, trips, nil
}

// straceStamp is strace -ttt's time at the start of a line.
var straceStamp = regexp.MustCompile(`^\d+\.\d+ `)

// execOf is the program a strace file's process executed, "" for none.
func execOf(lines []string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, "execve(\"") {
			return strings.SplitN(l, "\"", 3)[1]
		}
	}
	return ""
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		out = append(out, s.Text())
	}
	return out, s.Err()
}

const costTitle = "P10: one call's instructions and syscalls (valgrind, strace): devplumb through the agent beside the pass-through"
