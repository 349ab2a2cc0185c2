package vm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// event is one line of test2json's output.
type event struct {
	Action string
	Test   string
	Output string
}

// guestTest is one top-level guest test: its output (its subtests' included) and how
// it ended ("pass", "fail", "skip"; "" when the stream stopped first).
type guestTest struct {
	name   string
	output strings.Builder
	result string
}

// parseResults turns the guest's -test.v=test2json stream into its top-level tests, in
// the order they ran, with go tool test2json (the go command's own converter), and the
// output that belongs to no test (the binary's own PASS/FAIL lines, a panic).
func parseResults(path string) ([]*guestTest, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("guest results: %w", err)
	}
	cmd := exec.Command("go", "tool", "test2json")
	cmd.Stdin = bytes.NewReader(raw)
	out, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("go tool test2json: %w", err)
	}
	var tests []*guestTest
	byName := map[string]*guestTest{}
	var rest strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, "", fmt.Errorf("test2json line %q: %w", sc.Text(), err)
		}
		if e.Test == "" {
			rest.WriteString(e.Output)
			continue
		}
		top, _, sub := strings.Cut(e.Test, "/")
		gt := byName[top]
		if gt == nil {
			gt = &guestTest{name: top}
			byName[top] = gt
			tests = append(tests, gt)
		}
		gt.output.WriteString(e.Output)
		if !sub && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
			gt.result = e.Action
		}
	}
	return tests, rest.String(), sc.Err()
}

// replay runs each guest test as a subtest of t with its output, passing, failing or
// skipped as it did in the guest. A test the stream left unfinished (the guest died
// in it) fails.
func replay(t *testing.T, tests []*guestTest) {
	for _, gt := range tests {
		t.Run(gt.name, func(t *testing.T) {
			t.Log("in the guest:\n" + gt.output.String())
			switch gt.result {
			case "pass":
			case "skip":
				t.Skip("skipped in the guest")
			case "fail":
				t.Error("failed in the guest")
			default:
				t.Error("did not finish in the guest (the guest stopped during it)")
			}
		})
	}
}
