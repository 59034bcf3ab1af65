package apierr

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The module's source, read syntactically: the reason constants every
// package declares and the places a reason is handed to this package.
// The tests in codes_test.go check them against Codes.

const modulePath = "github.com/sluice-ml/sluice"

// reasonConst is a package-level constant named Reason… whose value is a
// string literal: a reason code a component declares.
type reasonConst struct {
	dir, name, value string
	doc              string
	pos              token.Position
	used             bool
}

// reasonSite is a place a reason reaches this package: an argument in a
// reason slot of Errorf, WriteError, StatusError (or of a function that
// hands its parameter on to one), or the Reason of an Error literal.
type reasonSite struct {
	pos     token.Position
	literal string // the string literal passed, or ""
	value   string // the constant's value when it resolves to one
	status  int    // the HTTP status the site implies, 0 when unknown
	kind    Kind   // the error's kind, when hasKind
	hasKind bool
}

type scanFile struct {
	dir     string // relative to the module root
	path    string
	f       *ast.File
	imports map[string]string // local name → directory relative to the module root
}

// seeds are this package's functions with a reason parameter (its index).
var seeds = map[string]int{
	"internal/apierr.Errorf":         1,
	"internal/apierr.WriteError":     2,
	"internal/apierr.StatusError":    1,
	"internal/apierr.KindHTTPStatus": 1,
	"internal/apierr.CodeHTTPStatus": 1,
}

// notErrorReasons are Reason… constants that are not error codes: label
// values of metrics (outlier ejections, the catch-all label).
var notErrorReasons = map[string]bool{
	"internal/gateway/upstream.ReasonErrorRate":      true,
	"internal/gateway/upstream.ReasonConsecutive503": true,
	"internal/gateway.reasonOther":                   true, // the label of reasons outside the known set
}

type scan struct {
	fset   *token.FileSet
	files  []*scanFile
	consts []*reasonConst
	byKey  map[string]*reasonConst // dir.name → const
	takers map[string]int          // dir.func → reason parameter index
	// statusSlot and kindSlot: dir.func → index of the parameter a reason
	// taker hands on as an HTTP status (WriteError's) or a Kind (Errorf's).
	statusSlot map[string]int
	kindSlot   map[string]int
	// fixedStatus and fixedKind: dir.func → the HTTP status or Kind a
	// reason taker raises its reason with whatever its caller passes
	// (a helper such as unavailablef).
	fixedStatus map[string]int
	fixedKind   map[string]Kind
	sites       []reasonSite
}

func scanModule(t *testing.T, root string) *scan {
	t.Helper()
	s := &scan{
		fset: token.NewFileSet(), byKey: map[string]*reasonConst{}, takers: map[string]int{},
		statusSlot:  map[string]int{"internal/apierr.WriteError": 1},
		kindSlot:    map[string]int{"internal/apierr.Errorf": 0},
		fixedStatus: map[string]int{}, fixedKind: map[string]Kind{},
	}
	maps.Copy(s.takers, seeds)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(s.fset, p, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		sf := &scanFile{dir: filepath.ToSlash(rel), path: p, f: f, imports: map[string]string{}}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			dir, ok := strings.CutPrefix(ip, modulePath+"/")
			if !ok {
				continue
			}
			local := filepath.Base(ip)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			sf.imports[local] = dir
		}
		s.files = append(s.files, sf)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sf := range s.files {
		s.collectConsts(sf)
	}
	for s.propagate() {
	}
	for _, sf := range s.files {
		s.collectSites(sf)
		s.markUses(sf)
	}
	return s
}

func (s *scan) collectConsts(sf *scanFile) {
	for _, d := range sf.f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !isReasonName(n.Name) || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				key := sf.dir + "." + n.Name
				if notErrorReasons[key] {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				doc := vs.Doc.Text()
				if doc == "" {
					doc = vs.Comment.Text()
				}
				if doc == "" && len(gd.Specs) == 1 {
					doc = gd.Doc.Text()
				}
				c := &reasonConst{dir: sf.dir, name: n.Name, value: v, doc: doc, pos: s.fset.Position(n.Pos())}
				s.consts = append(s.consts, c)
				s.byKey[key] = c
			}
		}
	}
}

// callee names the function a call calls, as dir.name.
func (sf *scanFile) callee(fun ast.Expr) string {
	switch f := fun.(type) {
	case *ast.Ident:
		return sf.dir + "." + f.Name
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok {
			if dir, ok := sf.imports[x.Name]; ok {
				return dir + "." + f.Sel.Name
			}
		}
		return sf.dir + "." + f.Sel.Name // a method of this package, as near as syntax tells
	}
	return ""
}

// ref resolves an identifier or qualified identifier to a reason constant.
func (sf *scanFile) ref(s *scan, e ast.Expr) *reasonConst {
	switch x := e.(type) {
	case *ast.Ident:
		return s.byKey[sf.dir+"."+x.Name]
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			if dir, ok := sf.imports[id.Name]; ok {
				return s.byKey[dir+"."+x.Sel.Name]
			}
		}
	}
	return nil
}

// isErrorLit reports whether cl is an apierr.Error literal (Error within
// this package).
func (sf *scanFile) isErrorLit(cl *ast.CompositeLit) bool {
	switch t := cl.Type.(type) {
	case *ast.Ident:
		return sf.dir == "internal/apierr" && t.Name == "Error"
	case *ast.SelectorExpr:
		id, ok := t.X.(*ast.Ident)
		return ok && sf.imports[id.Name] == "internal/apierr" && t.Sel.Name == "Error"
	}
	return false
}

// propagate adds the functions that hand a parameter on to a reason slot,
// and those that hand one on to the status slot (WriteError's) or the
// kind slot (Errorf's) of a reason taker; it reports whether it added any.
func (s *scan) propagate() bool {
	added := false
	for _, sf := range s.files {
		for _, d := range sf.f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			params := map[string]int{}
			i := 0
			for _, fld := range fd.Type.Params.List {
				for _, n := range fld.Names {
					params[n.Name] = i
					i++
				}
				if len(fld.Names) == 0 {
					i++
				}
			}
			key := sf.dir + "." + fd.Name.Name
			// record notes that the function hands parameter arg on to a
			// slot of the kind m keeps.
			record := func(m map[string]int, arg ast.Expr) {
				id, ok := arg.(*ast.Ident)
				if !ok {
					return
				}
				j, ok := params[id.Name]
				if _, known := m[key]; ok && !known {
					m[key] = j
					added = true
				}
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.CallExpr:
					callee := sf.callee(x.Fun)
					k, ok := s.takers[callee]
					if !ok || k >= len(x.Args) {
						return true
					}
					record(s.takers, x.Args[k])
					if j, ok := s.statusSlot[callee]; ok && j < len(x.Args) {
						record(s.statusSlot, x.Args[j])
					}
					if j, ok := s.kindSlot[callee]; ok && j < len(x.Args) {
						record(s.kindSlot, x.Args[j])
					}
					if id, ok := x.Args[k].(*ast.Ident); ok {
						if _, isParam := params[id.Name]; isParam && s.fixSlots(sf, key, callee, x) {
							added = true
						}
					}
				case *ast.CompositeLit:
					if !sf.isErrorLit(x) {
						return true
					}
					for _, e := range x.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == "Reason" {
							record(s.takers, kv.Value)
						}
					}
				}
				return true
			})
		}
	}
	return added
}

// fixSlots records what a reason taker (key) fixes of the status or kind
// when it hands its reason parameter on in call: a constant in the
// callee's status or kind slot, or what the callee itself fixes. It
// reports whether it recorded anything new.
func (s *scan) fixSlots(sf *scanFile, key, callee string, call *ast.CallExpr) bool {
	added := false
	if _, known := s.fixedStatus[key]; !known {
		st := s.fixedStatus[callee]
		if j, ok := s.statusSlot[callee]; ok && j < len(call.Args) {
			if c := httpStatusConst(call.Args[j]); c != 0 {
				st = c
			}
		}
		if st != 0 {
			s.fixedStatus[key] = st
			added = true
		}
	}
	if _, known := s.fixedKind[key]; !known {
		kd, ok := s.fixedKind[callee]
		if j, slot := s.kindSlot[callee]; slot && j < len(call.Args) {
			if k, isConst := sf.kind(call.Args[j]); isConst {
				kd, ok = k, true
			}
		}
		if ok {
			s.fixedKind[key] = kd
			added = true
		}
	}
	return added
}

func (s *scan) collectSites(sf *scanFile) {
	add := func(arg, kind ast.Expr, status int) {
		site := reasonSite{pos: s.fset.Position(arg.Pos()), status: status}
		site.kind, site.hasKind = sf.kind(kind)
		if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			site.literal, _ = strconv.Unquote(lit.Value)
			site.value = site.literal
		} else if c := sf.ref(s, arg); c != nil {
			site.value = c.value
		}
		s.sites = append(s.sites, site)
	}
	ast.Inspect(sf.f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CallExpr:
			callee := sf.callee(x.Fun)
			k, ok := s.takers[callee]
			if !ok || k >= len(x.Args) {
				return true
			}
			status := 0
			var kind ast.Expr
			if j, ok := s.kindSlot[callee]; ok && j < len(x.Args) {
				kind = x.Args[j]
				status = sf.kindStatus(s, kind, x.Args[k])
			}
			if j, ok := s.statusSlot[callee]; ok && j < len(x.Args) {
				status = httpStatusConst(x.Args[j])
			}
			add(x.Args[k], kind, status)
			site := &s.sites[len(s.sites)-1]
			if st, ok := s.fixedStatus[callee]; ok && site.status == 0 {
				site.status = st
			}
			if kd, ok := s.fixedKind[callee]; ok && !site.hasKind {
				site.kind, site.hasKind = kd, true
				if site.status == 0 {
					site.status = KindHTTPStatus(kd, site.value)
				}
			}
		case *ast.CompositeLit:
			if !sf.isErrorLit(x) {
				return true
			}
			var kind, reason ast.Expr
			for _, e := range x.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch kv.Key.(*ast.Ident).Name {
				case "Kind":
					kind = kv.Value
				case "Reason":
					reason = kv.Value
				}
			}
			if reason != nil {
				add(reason, kind, sf.kindStatus(s, kind, reason))
			}
		}
		return true
	})
}

// kindStatus returns the HTTP status an error of the kind expression
// answers with, or 0 when the kind is not a constant of this package.
func (sf *scanFile) kindStatus(s *scan, kind, reason ast.Expr) int {
	kd, ok := sf.kind(kind)
	if !ok {
		return 0
	}
	r := ""
	if c := sf.ref(s, reason); c != nil {
		r = c.value
	}
	return KindHTTPStatus(kd, r)
}

// kind resolves a Kind constant of this package.
func (sf *scanFile) kind(kind ast.Expr) (Kind, bool) {
	var name string
	switch k := kind.(type) {
	case *ast.SelectorExpr:
		if id, ok := k.X.(*ast.Ident); ok && sf.imports[id.Name] == "internal/apierr" {
			name = k.Sel.Name
		}
	case *ast.Ident:
		if sf.dir == "internal/apierr" {
			name = k.Name
		}
	}
	kd, ok := kindByName[name]
	return kd, ok
}

var kindByName = map[string]Kind{
	"KindInternal": KindInternal, "KindInvalid": KindInvalid, "KindNotFound": KindNotFound,
	"KindUnavailable": KindUnavailable, "KindResourceExhausted": KindResourceExhausted,
	"KindConflict": KindConflict, "KindUnsupported": KindUnsupported, "KindTimeout": KindTimeout,
	"KindUnauthenticated": KindUnauthenticated, "KindPermissionDenied": KindPermissionDenied,
}

// httpStatusConst returns the value of an http.StatusX expression, or 0.
func httpStatusConst(e ast.Expr) int {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return 0
	}
	if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "http" {
		return 0
	}
	return statusByName[sel.Sel.Name]
}

var statusByName = func() map[string]int {
	m := map[string]int{}
	for c := 100; c < 600; c++ {
		if t := http.StatusText(c); t != "" {
			m["Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(t)] = c
		}
	}
	m["StatusRequestEntityTooLarge"] = http.StatusRequestEntityTooLarge
	return m
}()

// markUses marks the constants a file refers to (outside their own
// declaration).
func (s *scan) markUses(sf *scanFile) {
	ast.Inspect(sf.f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.GenDecl:
			if x.Tok == token.CONST {
				// a constant defined as another one uses it
				for _, spec := range x.Specs {
					for _, v := range spec.(*ast.ValueSpec).Values {
						if c := sf.ref(s, v); c != nil {
							c.used = true
						}
					}
				}
				return false
			}
		case *ast.SelectorExpr:
			if c := sf.ref(s, x); c != nil {
				c.used = true
			}
			return false
		case *ast.Ident:
			if c := sf.ref(s, x); c != nil {
				c.used = true
			}
		}
		return true
	})
}

// isReasonName reports whether a constant's name marks it a reason code:
// Reason… or reason… followed by an upper-case letter.
func isReasonName(name string) bool {
	rest, ok := strings.CutPrefix(name, "Reason")
	if !ok {
		rest, ok = strings.CutPrefix(name, "reason")
	}
	return ok && rest != "" && rest[0] >= 'A' && rest[0] <= 'Z'
}
