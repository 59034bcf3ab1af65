package archtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// depguardRule is one rule of depguard's settings in .golangci.yml.
type depguardRule struct {
	Files    []string `yaml:"files"`
	ListMode string   `yaml:"list-mode"`
	Allow    []string `yaml:"allow"`
}

// strictRule pairs an archtest rule that allows only a list of internal
// imports with the depguard rule (list-mode strict) that restates it.
type strictRule struct {
	lint  string   // the depguard rule's name
	from  string   // the package the rule is about
	allow []string // what archtest lets it import of this module
}

// strictRules are every archtest rule of the "imports only these" kind.
var strictRules = []strictRule{
	{lint: "infer", from: "internal/infer", allow: inferImports},
	{lint: "apierr", from: "internal/apierr", allow: apierrImports},
	{lint: "release-hook", from: "internal/gateway/release", allow: releaseHookImports},
	{lint: "config", from: "internal/config", allow: configLeaves},
}

// minimalPrefixes is list without the packages another entry of list
// already covers: depguard matches allow entries as import-path
// prefixes, so "internal/feature" admits "internal/feature/serving" too.
func minimalPrefixes(list []string) []string {
	var out []string
	for _, p := range list {
		covered := false
		for _, q := range list {
			if q != p && under(p, q) {
				covered = true
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// internalAllows are the entries of allow inside this module, in rel form.
func internalAllows(allow []string) []string {
	var out []string
	for _, a := range allow {
		if p, ok := strings.CutPrefix(a, module+"/"); ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// lintRules reads depguard's rules from .golangci.yml.
func lintRules(t *testing.T) map[string]depguardRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".golangci.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Linters struct {
			Settings struct {
				Depguard struct {
					Rules map[string]depguardRule `yaml:"rules"`
				} `yaml:"depguard"`
			} `yaml:"settings"`
		} `yaml:"linters"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf(".golangci.yml: %v", err)
	}
	return cfg.Linters.Settings.Depguard.Rules
}

// TestLintConfigAgrees: every archtest rule that allows a package only a
// list of internal imports has a depguard rule in .golangci.yml, in
// strict list mode, over that package's files, allowing exactly that list
// of this module (as depguard's prefixes), so the linter and this package
// cannot disagree about what those packages may import. The config
// leaves' rule covers exactly configLeaves and allows nothing outside them.
func TestLintConfigAgrees(t *testing.T) {
	rules := lintRules(t)
	for _, sr := range strictRules {
		r, ok := rules[sr.lint]
		if !ok {
			t.Errorf(".golangci.yml: no depguard rule %s for archtest's rule on %s", sr.lint, sr.from)
			continue
		}
		if r.ListMode != "strict" {
			t.Errorf(".golangci.yml depguard rule %s: list-mode %q, want strict", sr.lint, r.ListMode)
		}
		if glob := "**/" + sr.from + "/*.go"; !slices.Contains(r.Files, glob) {
			t.Errorf(".golangci.yml depguard rule %s: files %v do not name %s", sr.lint, r.Files, glob)
		}
		if got, want := internalAllows(r.Allow), minimalPrefixes(sr.allow); !slices.Equal(got, want) {
			t.Errorf(".golangci.yml depguard rule %s allows %v of this module; archtest allows %s %v", sr.lint, got, sr.from, want)
		}
	}
	// A rule without files applies to every file: only the module-wide
	// "main" rule (banned third-party packages) may be one.
	for name, r := range rules {
		if name != "main" && len(r.Files) == 0 {
			t.Errorf(".golangci.yml depguard rule %s names no files, so it would apply to every file", name)
		}
	}
	leaves, ok := rules["config-leaves"]
	if !ok {
		t.Fatal(".golangci.yml: no depguard rule config-leaves")
	}
	var files []string
	for _, f := range leaves.Files {
		if d, ok := strings.CutSuffix(strings.TrimPrefix(f, "**/"), "/*.go"); ok {
			files = append(files, d)
		}
	}
	want := slices.Sorted(slices.Values(configLeaves))
	if got := slices.Sorted(slices.Values(files)); !slices.Equal(got, want) {
		t.Errorf(".golangci.yml depguard rule config-leaves covers %v; archtest's configLeaves are %v", got, want)
	}
	for _, a := range internalAllows(leaves.Allow) {
		if !slices.Contains(configLeaves, a) {
			t.Errorf(".golangci.yml depguard rule config-leaves allows %s, which is not one of archtest's configLeaves", a)
		}
	}
}

// TestMinimalPrefixes: the prefix reduction the agreement check relies on.
func TestMinimalPrefixes(t *testing.T) {
	got := minimalPrefixes([]string{"internal/infer", "internal/feature/serving", "internal/feature", "internal/featurex"})
	want := []string{"internal/feature", "internal/featurex", "internal/infer"}
	if !slices.Equal(got, want) {
		t.Errorf("minimalPrefixes = %v, want %v", got, want)
	}
}
