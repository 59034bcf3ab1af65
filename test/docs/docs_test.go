package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stalePhrases are the ways a text says that something is not built yet:
// true when written, false once it lands, and nobody rereads it then. A
// doc says what exists; a plan belongs in the tracker.
var stalePhrases = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`\b(comes|lands|landing|coming) next\b`,
	`\bcoming soon\b`,
	`\bnext (issue|wave|release|step|milestone)s?\b`,
	`\(today[:,)]`,
	`\btoday:`,
	`^today\b`,
	`\bwill (land|come|arrive|be (added|built|implemented|supported|available))\b`,
	`\bwill keep once\b`,
	`\bnot (yet )?(built|implemented) yet\b`,
	`\bnot yet (built|implemented|supported|available)\b`,
	`\bfuture work\b`,
	`\bplanned\b`,
	`\bTODO\b`,
	`\bissue \d+\b`,
	`\bitem \d+\b`,
}, "|"))

// allowedStale are honest statements that match a phrase: the file, and
// a piece of the line that makes it honest. Keep it short.
var allowedStale = []struct{ file, line string }{}

// docFiles are the documents the tests read: README.md, docs/*.md and the
// READMEs under deploy/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "deploy/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(repoDir, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, err := filepath.Rel(repoDir, f)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, rel)
		}
	}
	return files
}

// TestNoStaleClaims fails when a doc or a help text says something is
// "next", "coming", "(today: ...)" or cites a tracker item.
func TestNoStaleClaims(t *testing.T) {
	check := func(name, text string) {
		for i, line := range strings.Split(text, "\n") {
			if !stalePhrases.MatchString(line) || allowed(name, line) {
				continue
			}
			t.Errorf("%s:%d: %q claims something is not built yet (or cites a tracker item); say what exists, or add an honest not-yet statement to allowedStale", name, i+1, strings.TrimSpace(line))
		}
	}
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoDir, f))
		if err != nil {
			t.Fatal(err)
		}
		check(f, string(b))
	}
	for _, cmd := range commandTree(t, nil) {
		check("sluice "+strings.Join(cmd, " ")+" --help", help(t, cmd))
	}
	main, err := os.ReadFile(filepath.Join(repoDir, "cmd", "sluice", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	check("cmd/sluice/main.go", string(main))
}

func allowed(file, line string) bool {
	for _, a := range allowedStale {
		if a.file == file && strings.Contains(line, a.line) {
			return true
		}
	}
	return false
}

// help runs "sluice CMD --help".
func help(t *testing.T, cmd []string) string {
	t.Helper()
	out, err := exec.Command(binPath, append(append([]string{}, cmd...), "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice %s --help: %v\n%s", strings.Join(cmd, " "), err, out)
	}
	return string(out)
}

// commandTree lists every command under parent (nil: the root, included),
// from the "Available Commands" of each help text.
func commandTree(t *testing.T, parent []string) [][]string {
	t.Helper()
	out := [][]string{parent}
	text := help(t, parent)
	_, rest, ok := strings.Cut(text, "Available Commands:\n")
	if !ok {
		return out
	}
	for line := range strings.SplitSeq(rest, "\n") {
		if strings.TrimSpace(line) == "" {
			break
		}
		name := strings.Fields(line)[0]
		if name == "help" || name == "completion" {
			continue
		}
		out = append(out, commandTree(t, append(append([]string{}, parent...), name))...)
	}
	return out
}

// TestArchitectureListsEveryPackage: docs/architecture.md names every
// package under internal/ (as internal/x/y, or x/y beside its parent).
func TestArchitectureListsEveryPackage(t *testing.T) {
	arch, err := os.ReadFile(filepath.Join(repoDir, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(arch)
	err = filepath.WalkDir(filepath.Join(repoDir, "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		if !hasGo(t, path) {
			return nil
		}
		rel, err := filepath.Rel(repoDir, path)
		if err != nil {
			return err
		}
		short := strings.TrimPrefix(rel, "internal/")
		if !strings.Contains(doc, "`"+rel) && !strings.Contains(doc, "`"+short+"`") && !strings.Contains(doc, "`"+short+"/") &&
			!strings.Contains(doc, "`"+filepath.Base(rel)+"`") {
			t.Errorf("docs/architecture.md does not name %s: add it to a package table", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func hasGo(t *testing.T, dir string) bool {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m) > 0
}

// TestReadmeListsTheDocs: every document under docs/ and deploy/*/README.md
// is linked from README.md's documentation list.
func TestReadmeListsTheDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(b), "## Documentation")
	if !ok {
		t.Fatal("README.md has no \"## Documentation\" section")
	}
	for _, f := range docFiles(t)[1:] {
		if !strings.Contains(list, "("+f+")") {
			t.Errorf("README.md's documentation list does not link %s", f)
		}
	}
	for _, topic := range []string{"console", "sluice status", "shadow", "replay", "diff", "rollout", "Grafana", "alert rules", "tracing", "SLUICE_GATEWAY_PORT"} {
		if !strings.Contains(string(b), topic) {
			t.Errorf("README.md never mentions %q", topic)
		}
	}
}
