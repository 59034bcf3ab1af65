package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/sluice-ml/sluice"

// root is the module's root, from this package's folder.
const root = "../.."

// pkg is what the rules read of one package, as "go list -json" prints it.
type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	CgoFiles     []string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// rel is p without the module prefix ("internal/config"); "" for a
// package outside the module (the standard library, third parties).
func rel(p string) string {
	if p == module {
		return "."
	}
	r, ok := strings.CutPrefix(p, module+"/")
	if !ok {
		return ""
	}
	return r
}

// under reports whether module path p (rel form) is one of prefixes or
// inside one.
func under(p string, prefixes ...string) bool {
	for _, pre := range prefixes {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

var graph = sync.OnceValues(load)

// load lists every package of the module, with the build tags the linter
// uses, leaving out folders git ignores (scratch tools, say).
func load() ([]pkg, error) {
	cmd := exec.Command("go", "list", "-e", "-json", "-tags=integration,e2e", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	kept, err := trackedDirs()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list: %w", err)
		}
		dir, err := filepath.Rel(abs, p.Dir)
		if err != nil {
			return nil, err
		}
		if kept == nil || kept[filepath.ToSlash(dir)] {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs, nil
}

// trackedDirs returns the folders that hold Go files git tracks or would
// track (not ignored); nil when git cannot say (no repository), and then
// every package counts.
func trackedDirs() (map[string]bool, error) {
	cmd := exec.Command("git", "ls-files", "-co", "--exclude-standard", "*.go")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		if _, statErr := os.Stat(filepath.Join(root, ".git")); statErr != nil {
			return nil, nil //nolint:nilerr // not a git checkout: check every package
		}
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	dirs := map[string]bool{}
	for f := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		dirs[filepath.ToSlash(filepath.Dir(f))] = true
	}
	return dirs, nil
}

func packages(t *testing.T) []pkg {
	t.Helper()
	pkgs, err := graph()
	if err != nil {
		t.Fatal(err)
	}
	// A vacuous pass would hide a broken listing.
	have := map[string]bool{}
	for _, p := range pkgs {
		have[rel(p.ImportPath)] = true
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
	}
	for _, want := range []string{"internal/infer", "internal/config", "internal/gateway", "internal/modelrepo", "cmd/sluice"} {
		if !have[want] {
			t.Fatalf("go list found no package %s: the rules would check nothing", want)
		}
	}
	return pkgs
}

// configLeaves are the packages config may import: each owns settings
// sluice.yaml holds, as plain types and pure checks.
var configLeaves = []string{
	"internal/config/duration",
	"internal/yamlstrict",
	"internal/match",
	"internal/tlsconfig/tlsspec",
	"internal/admission/limitspec",
	"internal/authz/authzspec",
	"internal/release/rollout/rolloutspec",
	"internal/accuracy/accuracyspec",
}

// inferImports are the only internal packages internal/infer may import.
var inferImports = []string{"internal/apierr"}

// apierrImports are the only internal packages the error vocabulary may
// import: its two leaves.
var apierrImports = []string{"internal/scrub", "internal/jsonenc"}

// releaseHookImports are the packages internal/gateway/release may
// import: the settings, the feature and tensor types of its views.
var releaseHookImports = []string{"internal/config", "internal/feature", "internal/feature/serving", "internal/infer"}

// protocol are the packages that speak a wire protocol: the edges, the
// clients and codecs. The error vocabulary (apierr) is not one of them:
// every component raises its errors.
var protocol = []string{
	"internal/httpapi", "internal/grpcapi", "internal/kserve", "internal/kservewire",
	"internal/pb/gatewaypb", "internal/gateway", "internal/feature/serving", "internal/feature/servingapi",
	"internal/console", "internal/perf",
}

// A rule says which packages (from) may not import which (deny), and why.
type rule struct {
	name  string
	from  func(p string) bool
	deny  func(p, q string) bool
	tests bool // test imports count too
}

var rules = []rule{
	{
		name: "infer imports nothing internal but the error vocabulary",
		from: func(p string) bool { return p == "internal/infer" },
		deny: func(_, q string) bool { return !slices.Contains(inferImports, q) },
	},
	{
		name: "the error vocabulary imports nothing internal but its two leaves",
		from: func(p string) bool { return p == "internal/apierr" },
		deny: func(_, q string) bool { return !slices.Contains(apierrImports, q) },
	},
	{
		name: "backends know no protocol and no scheduler: the batcher calls backends, never the reverse",
		from: func(p string) bool { return under(p, "internal/backend") },
		deny: func(_, q string) bool {
			return under(q, protocol...) || under(q, "internal/batch", "internal/modelrepo", "internal/cli", "internal/release")
		},
	},
	{
		name: "scheduling and the repository know no protocol",
		from: func(p string) bool { return under(p, "internal/batch", "internal/modelrepo") },
		deny: func(_, q string) bool { return under(q, protocol...) || under(q, "internal/cli", "internal/release") },
	},
	{
		name: "the feature store knows nothing of models or the gateway",
		from: func(p string) bool { return under(p, "internal/feature") },
		deny: func(_, q string) bool {
			// feastpb is the feature store's own wire format (Feast's
			// serving API); every other generated package is not.
			return under(q, "internal/modelrepo", "internal/modelconfig", "internal/batch", "internal/backend",
				"internal/httpapi", "internal/grpcapi", "internal/kserve", "internal/kservewire", "internal/pb",
				"internal/gateway", "internal/perf", "internal/console", "internal/release") && q != "internal/pb/feastpb"
		},
	},
	{
		name: "the gateway never reaches into the model server nor imports another component's edge",
		from: func(p string) bool { return under(p, "internal/gateway") },
		deny: func(_, q string) bool {
			return under(q, "internal/modelrepo", "internal/modelconfig", "internal/batch", "internal/backend",
				"internal/httpapi", "internal/grpcapi", "internal/console")
		},
	},
	{
		name: "the release-hook interface imports no gateway code: the gateway implements its views, hooks implement it",
		from: func(p string) bool { return p == "internal/gateway/release" },
		deny: func(_, q string) bool { return !slices.Contains(releaseHookImports, q) },
	},
	{
		name:  "release mechanisms reach the gateway through the hook interface, never by importing it",
		from:  func(p string) bool { return under(p, "internal/gateway/release") && p != "internal/gateway/release" },
		deny:  func(_, q string) bool { return q == "internal/gateway" },
		tests: true,
	},
	{
		name: "the model server's edges are imported only by the wiring",
		from: func(p string) bool {
			return !under(p, "internal/cli", "internal/tools", "internal/httpapi", "internal/grpcapi")
		},
		deny: func(_, q string) bool { return under(q, "internal/httpapi", "internal/grpcapi") },
	},
	{
		// The feature server's Go API (feature/serving) never imports its
		// edges: they decode a wire format, call the Go API and map its
		// errors to status codes. The benchmark harness drives the HTTP
		// edge as a client would.
		name: "the feature server's edges are imported only by the wiring: the Go API never imports them",
		from: func(p string) bool {
			return !under(p, "internal/cli", "internal/tools", "internal/feature/servingapi", "bench")
		},
		deny: func(_, q string) bool { return under(q, "internal/feature/servingapi") },
	},
	{
		name: "config is data: it imports only the leaf packages that own sluice.yaml's settings",
		from: func(p string) bool { return p == "internal/config" || slices.Contains(configLeaves, p) },
		deny: func(_, q string) bool { return !slices.Contains(configLeaves, q) },
	},
	{
		name: "telemetry imports nothing internal",
		from: func(p string) bool { return under(p, "internal/telemetry") },
		deny: func(_, _ string) bool { return true },
	},
	{
		name:  "only main wires: nothing imports internal/cli but cmd/sluice",
		from:  func(p string) bool { return p != "cmd/sluice" && p != "internal/cli" },
		deny:  func(_, q string) bool { return under(q, "internal/cli") },
		tests: true,
	},
}

// violations applies rules to pkgs and returns one line per forbidden
// import.
func violations(pkgs []pkg, rules []rule) []string {
	var out []string
	for _, p := range pkgs {
		from := rel(p.ImportPath)
		for _, r := range rules {
			if !r.from(from) {
				continue
			}
			imports := p.Imports
			if r.tests {
				imports = slices.Concat(p.Imports, p.TestImports, p.XTestImports)
			}
			for _, imp := range imports {
				q := rel(imp)
				if q == "" || q == from {
					continue
				}
				if r.deny(from, q) {
					out = append(out, fmt.Sprintf("%s imports %s: %s", from, q, r.name))
				}
			}
		}
	}
	return out
}

func TestImportRules(t *testing.T) {
	for _, v := range violations(packages(t), rules) {
		t.Error(v)
	}
}

// Config's leaves hold plain types and pure checks: besides each other,
// they may import the standard library and yaml only (no metrics, no
// gRPC, no logging).
func TestConfigLeavesAreLeaves(t *testing.T) {
	for _, p := range packages(t) {
		if !slices.Contains(configLeaves, rel(p.ImportPath)) {
			continue
		}
		for _, imp := range p.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if rel(imp) != "" || !strings.Contains(first, ".") || imp == "go.yaml.in/yaml/v3" {
				continue
			}
			t.Errorf("%s imports %s: a config leaf imports nothing third-party but yaml", rel(p.ImportPath), imp)
		}
	}
}

// Generated code lives in internal/pb only, so that a reader knows which
// code is written by hand.
func TestGeneratedCodeOnlyInPB(t *testing.T) {
	for _, p := range packages(t) {
		if under(rel(p.ImportPath), "internal/pb") {
			continue
		}
		for _, f := range slices.Concat(p.GoFiles, p.CgoFiles) {
			if generated(t, filepath.Join(p.Dir, f)) {
				t.Errorf("%s/%s is generated code outside internal/pb", rel(p.ImportPath), f)
			}
		}
	}
}

// generated reports whether file carries Go's generated-code marker
// ("^// Code generated .* DO NOT EDIT\.$") before its package clause.
func generated(t *testing.T, file string) bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return false // removed since go list ran
	}
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "package ") {
			return false
		}
		if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(line, " DO NOT EDIT.") {
			return true
		}
	}
	return false
}

// The checker itself: each rule catches the import it is written for, on
// a made-up graph, so a rule that never fires is not mistaken for a kept
// one.
func TestRulesCatchViolations(t *testing.T) {
	p := func(path string, imports ...string) pkg {
		q := pkg{ImportPath: module + "/" + path}
		for _, i := range imports {
			q.Imports = append(q.Imports, module+"/"+i)
		}
		return q
	}
	tests := []struct {
		pkg  pkg
		want string // the rule that must fire; "" for none
	}{
		{p("internal/infer", "internal/jsonenc"), "infer imports nothing internal"},
		{p("internal/infer", "internal/apierr"), ""},
		{p("internal/apierr", "internal/infer"), "the error vocabulary imports nothing internal"},
		{p("internal/apierr", "internal/scrub", "internal/jsonenc"), ""},
		{p("internal/backend/onnxruntime", "internal/batch"), "backends know no protocol"},
		{p("internal/backend/python", "internal/grpcapi"), "backends know no protocol"},
		{p("internal/backend/python", "internal/infer", "internal/backend", "internal/modelconfig", "internal/pb/inferencepb", "internal/telemetry"), ""},
		{p("internal/modelrepo", "internal/grpcapi"), "scheduling and the repository know no protocol"},
		{p("internal/batch", "internal/kservewire"), "scheduling and the repository know no protocol"},
		{p("internal/batch", "internal/apierr"), ""},
		{p("internal/feature/serving", "internal/modelrepo"), "the feature store knows nothing of models"},
		{p("internal/feature/serving", "internal/pb/inferencepb"), "the feature store knows nothing of models"},
		{p("internal/feature/serving", "internal/pb/feastpb", "internal/apierr"), ""},
		{p("internal/gateway", "internal/modelrepo"), "the gateway never reaches into the model server"},
		{p("internal/gateway", "internal/feature/serving", "internal/kserve"), ""},
		{p("internal/release/replay", "internal/httpapi"), "the model server's edges are imported only by the wiring"},
		{p("internal/feature/serving", "internal/feature/servingapi"), "the feature server's edges are imported only by the wiring"},
		{p("internal/gateway", "internal/feature/servingapi"), "the feature server's edges are imported only by the wiring"},
		{p("internal/feature/servingapi", "internal/feature/serving", "internal/pb/feastpb", "internal/apierr"), ""},
		{p("internal/cli", "internal/feature/servingapi", "internal/feature/serving"), ""},
		{p("internal/config", "internal/release/rollout"), "config is data"},
		{p("internal/config", "internal/release/rollout/rolloutspec", "internal/match"), ""},
		{p("internal/tlsconfig/tlsspec", "internal/telemetry"), "config is data"},
		{p("internal/telemetry", "internal/gateway"), "telemetry imports nothing internal"},
		{p("internal/perf", "internal/cli"), "only main wires"},
		{p("cmd/sluice", "internal/cli"), ""},
	}
	for _, tt := range tests {
		t.Run(rel(tt.pkg.ImportPath), func(t *testing.T) {
			got := violations([]pkg{tt.pkg}, rules)
			switch {
			case tt.want == "" && len(got) > 0:
				t.Fatalf("violations = %q, want none", got)
			case tt.want != "" && (len(got) == 0 || !strings.Contains(got[0], tt.want)):
				t.Fatalf("violations = %q, want one from rule %q", got, tt.want)
			}
		})
	}
	// Test imports count for the rules that say so.
	x := pkg{ImportPath: module + "/internal/perf", XTestImports: []string{module + "/internal/cli"}}
	if got := violations([]pkg{x}, rules); len(got) != 1 {
		t.Fatalf("a test importing internal/cli: violations = %q, want one", got)
	}
}
