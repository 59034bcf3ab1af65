package archtest

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const goleakPath = "go.uber.org/goleak"

// noGoleak are the packages that start goroutines but whose tests cannot
// check for leaks with goleak, and why. Nothing else may be here: a
// package that starts goroutines owns them, and goleak in its TestMain
// (or VerifyNone in its tests) shows that each one ends.
var noGoleak = map[string]string{
	// Commands with no tests: goleak runs only inside "go test", and
	// these run only from bench/run.sh, where their goroutines end with
	// the process.
	"bench/cmd/accuracybench": "a benchmark command with no tests",
	"bench/cmd/trivialserver": "a benchmark command with no tests",
}

// goroutineStart is where a package's non-test code starts a goroutine.
type goroutineStart struct {
	pos  token.Position
	what string
}

// startsGoroutines returns the first place in files (of folder dir) that
// starts a goroutine: a go statement, a call of a method named Go
// (errgroup.Group.Go, sync.WaitGroup.Go) or time.AfterFunc. ok is false
// when none does.
func startsGoroutines(dir string, files []string) (at goroutineStart, ok bool, err error) {
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since go list ran
		}
		if err != nil {
			return goroutineStart{}, false, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ok {
				return false
			}
			switch n := n.(type) {
			case *ast.GoStmt:
				at, ok = goroutineStart{fset.Position(n.Pos()), "go statement"}, true
			case *ast.CallExpr:
				sel, isSel := n.Fun.(*ast.SelectorExpr)
				if !isSel {
					break
				}
				if x, isIdent := sel.X.(*ast.Ident); isIdent && x.Name == "time" && sel.Sel.Name == "AfterFunc" {
					at, ok = goroutineStart{fset.Position(n.Pos()), "time.AfterFunc"}, true
				} else if sel.Sel.Name == "Go" {
					at, ok = goroutineStart{fset.Position(n.Pos()), "a Go method call"}, true
				}
			}
			return !ok
		})
		if ok {
			return at, true, nil
		}
	}
	return goroutineStart{}, false, nil
}

// runsGoleak reports whether p's tests import goleak.
func runsGoleak(p pkg) bool {
	return slices.Contains(p.TestImports, goleakPath) || slices.Contains(p.XTestImports, goleakPath)
}

// leakViolations returns one line per package of pkgs that starts
// goroutines (starts says where, by import path) with nothing checking
// that they end:
//
//   - a package with tests of its own must run goleak in them;
//   - a package without tests (test support such as objstoretest, whose
//     goroutines run inside other packages' tests) must be imported only
//     by packages whose tests run goleak.
//
// allow lists the exceptions; an entry that no longer applies is a
// violation too, so the list cannot go stale.
func leakViolations(pkgs []pkg, starts map[string]goroutineStart, allow map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range pkgs {
		from := rel(p.ImportPath)
		at, ok := starts[p.ImportPath]
		if !ok {
			continue
		}
		seen[from] = true
		if _, allowed := allow[from]; allowed {
			if runsGoleak(p) {
				out = append(out, fmt.Sprintf("%s runs goleak now: take it off the allow-list", from))
			}
			continue
		}
		where := fmt.Sprintf("%s:%d", filepath.Base(at.pos.Filename), at.pos.Line)
		if len(p.TestGoFiles)+len(p.XTestGoFiles) > 0 {
			if !runsGoleak(p) {
				out = append(out, fmt.Sprintf("%s starts goroutines (%s, %s) and its tests do not run goleak", from, at.what, where))
			}
			continue
		}
		for _, q := range pkgs {
			if q.ImportPath == p.ImportPath || runsGoleak(q) {
				continue
			}
			if slices.Contains(slices.Concat(q.Imports, q.TestImports, q.XTestImports), p.ImportPath) {
				out = append(out, fmt.Sprintf("%s imports %s, which starts goroutines (%s, %s), and its tests do not run goleak", rel(q.ImportPath), from, at.what, where))
			}
		}
	}
	for from := range allow {
		if !seen[from] {
			out = append(out, fmt.Sprintf("%s is on the allow-list but starts no goroutine (or is gone): take it off", from))
		}
	}
	slices.Sort(out)
	return out
}

// Every goroutine has an owner and a stop path (STYLE.md, Lifecycle): a
// package whose code starts goroutines runs goleak in its tests, so a
// goroutine left behind by a Close, a cancelled Run or a finished request
// fails them.
func TestGoroutinesAreLeakChecked(t *testing.T) {
	pkgs := packages(t)
	starts := map[string]goroutineStart{}
	for _, p := range pkgs {
		at, ok, err := startsGoroutines(p.Dir, slices.Concat(p.GoFiles, p.CgoFiles))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			starts[p.ImportPath] = at
		}
	}
	// A vacuous pass would hide a broken scan.
	for _, want := range []string{"internal/batch", "internal/gateway", "internal/modelrepo"} {
		if _, ok := starts[module+"/"+want]; !ok {
			t.Fatalf("found no goroutine started in %s: the check would check nothing", want)
		}
	}
	for _, v := range leakViolations(pkgs, starts, noGoleak) {
		t.Error(v)
	}
}

// The checker itself, on made-up packages.
func TestLeakCheckCatchesViolations(t *testing.T) {
	at := goroutineStart{pos: token.Position{Filename: "x.go", Line: 1}, what: "go statement"}
	p := func(path string, tests bool, imports ...string) pkg {
		q := pkg{ImportPath: module + "/" + path}
		if tests {
			q.TestGoFiles = []string{"x_test.go"}
		}
		q.TestImports = append(q.TestImports, imports...)
		return q
	}
	helper := p("internal/x/xtest", false)
	tests := []struct {
		name  string
		pkgs  []pkg
		allow map[string]string
		want  []string // substrings, one per violation
	}{
		{"tests without goleak", []pkg{p("internal/a", true)}, nil, []string{"internal/a starts goroutines"}},
		{"tests with goleak", []pkg{p("internal/a", true, goleakPath)}, nil, nil},
		{
			"helper imported by a test without goleak",
			[]pkg{helper, p("internal/b", true, helper.ImportPath)},
			nil,
			[]string{"internal/b imports internal/x/xtest"},
		},
		{"helper imported by tests with goleak", []pkg{helper, p("internal/b", true, helper.ImportPath, goleakPath)}, nil, nil},
		{"allowed", []pkg{p("internal/a", true)}, map[string]string{"internal/a": "why"}, nil},
		{
			"allowed but runs goleak",
			[]pkg{p("internal/a", true, goleakPath)},
			map[string]string{"internal/a": "why"},
			[]string{"runs goleak now"},
		},
		{"allowed but starts nothing", nil, map[string]string{"internal/a": "why"}, []string{"starts no goroutine"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			starts := map[string]goroutineStart{}
			for _, q := range tt.pkgs {
				if q.ImportPath == module+"/internal/a" || q.ImportPath == helper.ImportPath {
					starts[q.ImportPath] = at
				}
			}
			got := leakViolations(tt.pkgs, starts, tt.allow)
			if len(got) != len(tt.want) {
				t.Fatalf("violations = %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %q, want one containing %q", got[i], w)
				}
			}
		})
	}
}

// startsGoroutines finds each kind of start, and nothing in code that
// starts none.
func TestStartsGoroutines(t *testing.T) {
	tests := []struct {
		src  string
		want string // "" for none
	}{
		{"package p\nfunc f() { go f() }\n", "go statement"},
		{"package p\nimport \"time\"\nfunc f() { time.AfterFunc(0, f) }\n", "time.AfterFunc"},
		{"package p\nimport \"sync\"\nfunc f() { var wg sync.WaitGroup; wg.Go(f) }\n", "a Go method call"},
		{"package p\nfunc f() { defer f(); g := func() {}; g() }\n", ""},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(tt.src), 0o600); err != nil {
			t.Fatal(err)
		}
		at, ok, err := startsGoroutines(dir, []string{"p.go"})
		if err != nil {
			t.Fatal(err)
		}
		if got := map[bool]string{true: at.what}[ok]; got != tt.want {
			t.Errorf("%q: found %q, want %q", tt.src, got, tt.want)
		}
	}
}
