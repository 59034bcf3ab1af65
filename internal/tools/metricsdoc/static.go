package metricsdoc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Definition is a metric defined in the source with literal names: a
// prometheus.CounterOpts, GaugeOpts, HistogramOpts or SummaryOpts
// composite literal, or a prometheus.NewDesc call.
type Definition struct {
	// Name is the fully qualified name (namespace_subsystem_name).
	Name string
	// Type is the metric type the options are for; empty for Opts and
	// NewDesc.
	Type string
	// Help is the literal help text, if any.
	Help string
	// Pos is file:line, relative to the root scanned.
	Pos string
}

// optsTypes maps the client's option types to metric types.
var optsTypes = map[string]string{
	"CounterOpts":   TypeCounter,
	"GaugeOpts":     TypeGauge,
	"HistogramOpts": TypeHistogram,
	"SummaryOpts":   TypeSummary,
	"Opts":          "",
}

// Definitions scans the non-test Go files under root's dirs (for example
// internal and cmd) for metric definitions whose names are string
// literals. Definitions built from variables are not seen; Collect covers
// those.
func Definitions(root string, dirs ...string) ([]Definition, error) {
	var out []Definition
	fset := token.NewFileSet()
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if e.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if def, ok := definition(n); ok {
					p := fset.Position(n.Pos())
					rel, _ := filepath.Rel(root, p.Filename)
					def.Pos = filepath.ToSlash(rel) + ":" + strconv.Itoa(p.Line)
					out = append(out, def)
				}
				return true
			})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// definition recognizes prometheus.XxxOpts{...} and prometheus.NewDesc(...).
func definition(n ast.Node) (Definition, bool) {
	switch n := n.(type) {
	case *ast.CompositeLit:
		kind, ok := promSelector(n.Type)
		if !ok {
			return Definition{}, false
		}
		typ, ok := optsTypes[kind]
		if !ok {
			return Definition{}, false
		}
		fields := map[string]string{}
		for _, el := range n.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, ok := kv.Key.(*ast.Ident)
			if !ok {
				continue
			}
			if s, ok := stringLit(kv.Value); ok {
				fields[key.Name] = s
			} else if key.Name == "Name" {
				return Definition{}, false // not a literal: Collect covers it
			}
		}
		if fields["Name"] == "" {
			return Definition{}, false
		}
		return Definition{
			Name: prometheus.BuildFQName(fields["Namespace"], fields["Subsystem"], fields["Name"]),
			Type: typ, Help: fields["Help"],
		}, true
	case *ast.CallExpr:
		if fn, ok := promSelector(n.Fun); !ok || fn != "NewDesc" || len(n.Args) < 2 {
			return Definition{}, false
		}
		name, ok := stringLit(n.Args[0])
		if !ok {
			return Definition{}, false
		}
		help, _ := stringLit(n.Args[1])
		return Definition{Name: name, Help: help}, true
	}
	return Definition{}, false
}

// promSelector returns Sel of an expression prometheus.Sel.
func promSelector(e ast.Expr) (string, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok || x.Name != "prometheus" {
		return "", false
	}
	return sel.Sel.Name, true
}

// stringLit returns the value of a string literal, or of a concatenation
// of string literals.
func stringLit(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok1 := stringLit(e.X)
		b, ok2 := stringLit(e.Y)
		return a + b, ok1 && ok2
	case *ast.ParenExpr:
		return stringLit(e.X)
	}
	return "", false
}
