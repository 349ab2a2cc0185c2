package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// userDocs are the documents a user reads, relative to the repository root:
// README.md, docs/*.md, CONTRIBUTING.md and each README.md of cmd/, e2e/ and
// deployments/. CHANGELOG.md is history: it names what was true then.
func userDocs(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md", "CONTRIBUTING.md", "deployments/README.md"}
	for _, glob := range []string{"docs/*.md", "cmd/*/README.md", "e2e/*/README.md"} {
		m, err := filepath.Glob(filepath.Join("..", glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel("..", p)
			docs = append(docs, rel)
		}
	}
	slices.Sort(docs)
	return docs
}

// readDoc is the text of a repository file given relative to the root.
func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// snippet is a piece of a document that may name a command: an inline code
// span, or one logical line of a fenced code block.
type snippet struct {
	doc, text string
	line      int
}

var inlineCode = regexp.MustCompile("`([^`\n]+)`")

// snippets are a document's code: each logical line of its fenced blocks (a
// line ending in "\" or followed by one that starts with "[" or "-" is
// continued) and each inline code span outside them.
func snippets(doc, text string) []snippet {
	var out []snippet
	in := false
	last := -1 // the block's previous line in out
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in, last = !in, -1
			continue
		}
		if !in {
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				out = append(out, snippet{doc, m[1], i + 1})
			}
			continue
		}
		trimmed := strings.TrimSpace(line)
		if last >= 0 && continues(out[last].text, trimmed) {
			out[last].text = strings.TrimSuffix(out[last].text, "\\") + " " + trimmed
			continue
		}
		out = append(out, snippet{doc, trimmed, i + 1})
		last = len(out) - 1
	}
	return out
}

// continues says whether a code line continues the previous one.
func continues(prev, line string) bool {
	return strings.HasSuffix(prev, "\\") || strings.HasPrefix(line, "[") || strings.HasPrefix(line, "--")
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings.
func headingAnchors(text string) []string {
	var anchors []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
		}
		if in || !strings.HasPrefix(line, "#") {
			continue
		}
		anchors = append(anchors, anchor(strings.TrimLeft(line, "# ")))
	}
	return anchors
}

// anchor is GitHub's slug of a heading: lower case, punctuation but "-" and
// "_" dropped, spaces made "-".
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Trust model: who writes each input":               "trust-model-who-writes-each-input",
		"What `make demo` shows":                           "what-make-demo-shows",
		"From device plugin to DRA: one NAD, one pod spec": "from-device-plugin-to-dra-one-nad-one-pod-spec",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// Every link to a heading (file.md#anchor, or #anchor in the same file) of the
// user documents reaches a heading of that file.
func TestMarkdownAnchorsResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]*)#([^)\s]+)\)`)
	for _, doc := range userDocs(t) {
		for _, m := range link.FindAllStringSubmatch(readDoc(t, doc), -1) {
			target := doc
			if m[1] != "" {
				if strings.Contains(m[1], "://") || !strings.HasSuffix(m[1], ".md") {
					continue
				}
				target = filepath.Join(filepath.Dir(doc), m[1])
			}
			b, err := os.ReadFile(filepath.Join("..", target))
			if err != nil {
				continue // TestMarkdownLinksResolve reports it
			}
			if !slices.Contains(headingAnchors(string(b)), m[2]) {
				t.Errorf("%s links to %s#%s: %s has no such heading", doc, m[1], m[2], target)
			}
		}
	}
}
