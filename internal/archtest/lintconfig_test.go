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
	Files []string `yaml:"files"`
	Allow []string `yaml:"allow"`
}

// TestLintConfigAgrees: the depguard rules of .golangci.yml that restate
// the config rule (which internal packages config and its leaves may
// import) name exactly configLeaves, so the linter and this package
// cannot disagree about what config may import.
func TestLintConfigAgrees(t *testing.T) {
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
	rules := cfg.Linters.Settings.Depguard.Rules
	config, ok := rules["config"]
	if !ok {
		t.Fatal(".golangci.yml: no depguard rule config")
	}
	var allowed []string
	for _, a := range config.Allow {
		if p, ok := strings.CutPrefix(a, module+"/"); ok {
			allowed = append(allowed, p)
		}
	}
	want := slices.Sorted(slices.Values(configLeaves))
	if got := slices.Sorted(slices.Values(allowed)); !slices.Equal(got, want) {
		t.Errorf(".golangci.yml depguard rule config allows %v of this module; archtest's configLeaves are %v", got, want)
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
	if got := slices.Sorted(slices.Values(files)); !slices.Equal(got, want) {
		t.Errorf(".golangci.yml depguard rule config-leaves covers %v; archtest's configLeaves are %v", got, want)
	}
}
