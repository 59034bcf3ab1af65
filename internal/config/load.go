package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/internal/yamlstrict"
)

// maxNodes bounds how many YAML nodes one load visits, aliases followed, so
// that a hostile file (alias bombs) cannot make the walk run for ever.
const maxNodes = 200_000

// maxDepth bounds how deeply nested a document may be.
const maxDepth = 100

// maxProblems bounds how many schema problems one load reports.
const maxProblems = 100

// FieldError is one thing wrong with a config file, with where it was written.
type FieldError struct {
	// File is the config file name as given to Load.
	File string
	// Line and Col are 1-based; 0 when the place is unknown.
	Line, Col int
	// Path is the field path, e.g. "gateway.services[0].routes[1].timeout".
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as "file:line:col: path: msg".
func (p *FieldError) Error() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", p.Line, p.Col)
		}
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// position is a 1-based line and column.
type position struct{ line, col int }

// source remembers where each field path was written and which values came
// from ${ENV} expansion.
type source struct {
	file    string
	pos     map[string]position
	fromEnv map[string]bool
	raw     map[string]string // the text of scalars that came from ${ENV}, before expansion
	// misspelt are the fields an unknown key likely meant ("routes" for
	// "routs"): a validation problem of theirs is the typo's echo.
	misspelt []string
}

// problem builds a FieldError for path, located at path or, when path was not
// written (a defaulted field), at its closest written parent.
func (s *source) problem(path, format string, args ...any) *FieldError {
	p := &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
	if s == nil {
		return p
	}
	p.File = s.file
	for q := path; ; {
		if at, ok := s.pos[q]; ok {
			p.Line, p.Col = at.line, at.col
			return p
		}
		cut := strings.LastIndexAny(q, ".[")
		if cut <= 0 {
			return p
		}
		q = q[:cut]
	}
}

// Problem places err at path's position in the file the Config was read
// from (or at its closest written parent: a defaulted field has none), as
// a FieldError. Checks made outside this package (the gateway's services
// against the models and features) report with it.
func (c *Config) Problem(path string, err error) *FieldError {
	return c.src.problem(path, "%s", err)
}

// Load reads the sluice.yaml at path, expands ${ENV} references from the
// process environment, decodes it strictly, applies defaults and validates
// it. Relative paths in it (model repositories, the feature repository, an
// access-log file) are resolved against the file's folder, as Prometheus
// does, so the file means the same from any working directory. The error
// lists every problem found, one per line, each as
// "file:line:col: field.path: message".
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *PathError already names the file
	}
	cfg, err := Parse(path, data, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	cfg.ResolvePaths(filepath.Dir(path))
	return cfg, nil
}

// ResolvePaths makes the relative paths of c relative to dir.
func (c *Config) ResolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	tls := func(t *TLS) {
		if t != nil {
			t.CertFile, t.KeyFile, t.ClientCAFile = abs(t.CertFile), abs(t.KeyFile), abs(t.ClientCAFile)
		}
	}
	clientTLS := func(t *ClientTLS) {
		if t != nil {
			t.CAFile, t.CertFile, t.KeyFile = abs(t.CAFile), abs(t.CertFile), abs(t.KeyFile)
		}
	}
	if m := c.ModelServer; m != nil {
		for i, r := range m.ModelRepository {
			if !isObjectStorage(r) {
				m.ModelRepository[i] = abs(r)
			}
		}
		if m.RepositoryCacheDir != "" {
			m.RepositoryCacheDir = abs(m.RepositoryCacheDir)
		}
		tls(m.TLS)
	}
	if f := c.FeatureServer; f != nil {
		f.Repo = abs(f.Repo)
		tls(f.TLS)
	}
	if cl := c.Cluster; cl != nil {
		clientTLS(cl.NATS.TLS)
		cl.NATS.Credentials = abs(cl.NATS.Credentials)
	}
	if s := c.Security; s != nil {
		switch s.AuditLog {
		case "", "stdout", "stderr", "off":
		default:
			s.AuditLog = abs(s.AuditLog)
		}
	}
	if g := c.Gateway; g != nil {
		tls(g.TLS)
		tls(g.AdminTLS)
		clientTLS(g.RateLimitBackend.Redis.TLS)
		clientTLS(g.Recording.NATS.TLS)
		for i := range g.Backends {
			clientTLS(g.Backends[i].TLS)
		}
		g.Recording.Dir = abs(g.Recording.Dir)
		g.Console.HistoryFile = abs(g.Console.HistoryFile)
		g.Recording.Spool.Dir = abs(g.Recording.Spool.Dir)
		if a := g.Accuracy; a != nil {
			a.Path, a.Log.Dir = abs(a.Path), abs(a.Log.Dir)
		}
		for i := range g.Services {
			if ro := g.Services[i].Rollout; ro != nil {
				ro.StateFile = abs(ro.StateFile)
			}
			if d := g.Services[i].Drift; d != nil {
				d.Reference = abs(d.Reference)
			}
			if fb := g.Services[i].Fallback; fb != nil {
				fb.BaselineFile = abs(fb.BaselineFile)
			}
		}
		switch g.AccessLog {
		case "", "stdout", "stderr", "off":
		default:
			g.AccessLog = abs(g.AccessLog)
		}
	}
}

// Parse is Load for a file already read; file names it in problems and
// lookupEnv resolves ${ENV} references (nil resolves none).
func Parse(file string, data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	cfg, err := parse(file, data, lookupEnv)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// LoadForCheck is Load for "sluice config check": it reports every problem
// of the file in one pass (schema, then validation of what could be
// decoded) and returns the Config as far as it was read, problems or not,
// so the caller can go on to check it against the models and features.
// The Config is nil only when the file cannot be read or is not YAML.
func LoadForCheck(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := parse(path, data, os.LookupEnv)
	if cfg != nil {
		cfg.ResolvePaths(filepath.Dir(path))
	}
	return cfg, err
}

// parse decodes and validates data. With problems, it still returns what
// it decoded (nil for a file that is not YAML): schema problems do not
// stop validation, so one run reports them all.
func parse(file string, data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, syntaxError(file, data, err)
	}
	src := &source{file: file, pos: map[string]position{}, fromEnv: map[string]bool{}, raw: map[string]string{}}
	cfg := &Config{}
	if doc.Kind == 0 || len(doc.Content) == 0 { // empty file
		cfg.src = src
		cfg.applyDefaults()
		return cfg, cfg.Validate()
	}
	root := doc.Content[0]
	problems := checkSchema(root, src, lookupEnv)
	if err := root.Decode(cfg); err != nil && len(problems) == 0 {
		// The schema walk reports type mismatches with their positions;
		// a decode error it missed is reported as yaml words it.
		problems = append(problems, decodeError(file, err))
	}
	cfg.src = src
	if len(problems) >= maxProblems {
		return cfg, errors.Join(problems...)
	}
	problems = append(problems, cfg.hashAPIKeys()...)
	problems = append(problems, cfg.hashTokens()...)
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		problems = append(problems, withoutEchoes(err, src.misspelt)...)
	}
	return cfg, errors.Join(problems...)
}

// withoutEchoes splits the joined validation error and drops the problems
// of fields that a misspelt key was meant to set: "routs: unknown field
// (did you mean routes?)" is the one problem, not also "routes: required".
func withoutEchoes(err error, misspelt []string) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
next:
	for _, e := range j.Unwrap() {
		if fe, ok := errors.AsType[*FieldError](e); ok {
			for _, m := range misspelt {
				if fe.Path == m || strings.HasPrefix(fe.Path, m+".") || strings.HasPrefix(fe.Path, m+"[") {
					continue next
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// syntaxError reports a YAML syntax error at the line where the document
// stops being YAML. yaml.v3 names the start of the enclosing construct,
// zero-based for parser errors, so an error on line 3 can read "line 1";
// the first line after the longest prefix of whole lines that still
// parses is where the reader should look. The column is that line's first
// non-blank character.
func syntaxError(file string, data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if _, m, ok := strings.Cut(rest, ": "); ok {
			msg = m
		}
	}
	lines := strings.SplitAfter(string(data), "\n")
	if len(data) > maxSyntaxScanBytes {
		return fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	// Binary search for the longest prefix that parses: ~log2(lines)
	// parses. A prefix that ends inside a multi-line flow collection
	// fails although the file is fine there, so the answer can be early
	// by a few lines in such a file; it is never later than the error.
	okPrefix := func(k int) bool {
		var n yaml.Node
		return yaml.Unmarshal([]byte(strings.Join(lines[:k], "")), &n) == nil
	}
	lo, hi := 0, len(lines) // okPrefix(lo) holds (the empty prefix); the whole file fails
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if okPrefix(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	line := min(lo+1, len(lines))
	text := strings.TrimRight(lines[line-1], "\r\n")
	col := len(text) - len(strings.TrimLeft(text, " \t")) + 1
	return &FieldError{File: file, Line: line, Col: col, Msg: "YAML syntax: " + msg}
}

// maxSyntaxScanBytes bounds syntaxError's search (each step parses a
// prefix): a larger file gets yaml's own line number.
const maxSyntaxScanBytes = 1 << 20

// decodeError rewrites yaml's "line N: msg" errors as "file:N: msg", one per line.
func decodeError(file string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	errs := make([]error, 0, len(te.Errors))
	for _, e := range te.Errors {
		if rest, ok := strings.CutPrefix(e, "line "); ok {
			if n, msg, ok := strings.Cut(rest, ": "); ok {
				errs = append(errs, fmt.Errorf("%s:%s: %s", file, n, msg))
				continue
			}
		}
		errs = append(errs, fmt.Errorf("%s: %s", file, e))
	}
	return errors.Join(errs...)
}

// hashAPIKeys replaces each client's plain api_key (which must come from
// ${ENV}) by its SHA-256, so the Config never holds the secret.
func (c *Config) hashAPIKeys() []error {
	if c.Gateway == nil {
		return nil
	}
	var problems []error
	for i := range c.Gateway.Clients {
		cl := &c.Gateway.Clients[i]
		if c.src != nil && c.src.fromEnv[fmt.Sprintf("gateway.clients[%d].api_key", i)] {
			cl.APIKeyRef = c.src.raw[fmt.Sprintf("gateway.clients[%d].api_key", i)]
		}
		if err := c.hashSecret(fmt.Sprintf("gateway.clients[%d].api_key", i), "api_key", "API key", &cl.APIKey, &cl.APIKeySHA256); err != nil {
			problems = append(problems, err)
		}
	}
	return problems
}

// hashSecret replaces the plain secret at path (field name field, which
// must come from ${ENV}) by its hex SHA-256 in *hash, and clears it.
func (c *Config) hashSecret(path, field, what string, plain, hash *string) error {
	defer func() { *plain = "" }()
	switch {
	case *plain == "" && c.src.fromEnv[path]:
		return c.src.problem(path, "expands to an empty %s", what)
	case *plain == "":
		return nil
	case !c.src.fromEnv[path]:
		return c.src.problem(path, "a literal %s: secrets must not sit in config; write %s: ${ENV_VAR} or %s_sha256", what, field, field)
	case *hash != "":
		return c.src.problem(path, "set %s or %s_sha256, not both", field, field)
	}
	sum := sha256.Sum256([]byte(*plain))
	*hash = hex.EncodeToString(sum[:])
	return nil
}

// checkSchema walks root against Config before it is decoded: it expands
// ${ENV} in scalars, records where every field path was written, and
// reports unknown keys (with a likely typo's fix) and values that do not
// fit their field, at most maxProblems of them.
func checkSchema(root *yaml.Node, src *source, lookupEnv func(string) (string, bool)) []error {
	var problems []error
	at := func(n *yaml.Node, path, msg string) {
		problems = append(problems, &FieldError{File: src.file, Line: n.Line, Col: n.Column, Path: path, Msg: msg})
	}
	seen := map[*yaml.Node]bool{} // scalars already expanded (aliases share nodes)
	w := yamlstrict.Walker{
		MaxNodes: maxNodes,
		MaxDepth: maxDepth,
		Stop:     func() bool { return len(problems) >= maxProblems },
		Limit:    func(n *yaml.Node, path string) { at(n, path, "document too large or too deeply nested") },
		Item:     src.record,
		Scalar: func(n *yaml.Node, t reflect.Type, path string) {
			if !seen[n] && strings.Contains(n.Value, "${") {
				seen[n] = true
				if err := src.expand(n, path, lookupEnv); err != nil {
					at(n, path, err.Error())
				}
			}
			if n.ShortTag() != "!!null" && n.Decode(reflect.New(t).Interface()) != nil {
				at(n, path, fmt.Sprintf("%s is not %s", quote(n.Value), typeName(t)))
			}
		},
		Mismatch: func(n *yaml.Node, t reflect.Type, path string) {
			got := "a mapping"
			if n.Kind == yaml.SequenceNode {
				got = "a list"
			}
			at(n, path, fmt.Sprintf("%s is not %s", got, typeName(t)))
		},
		Unknown: func(k *yaml.Node, t reflect.Type, path string) {
			msg := "unknown field"
			if s := yamlstrict.Suggest(k.Value, yamlstrict.Fields(t)); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
				if i := strings.LastIndexByte(path, '.'); i >= 0 {
					src.misspelt = append(src.misspelt, path[:i+1]+s)
				} else {
					src.misspelt = append(src.misspelt, s)
				}
			}
			at(k, path, msg)
		},
	}
	w.Walk(root, reflect.TypeFor[Config](), "")
	return problems
}

// typeName names t for users.
func typeName(t reflect.Type) string {
	if t == reflect.TypeFor[Duration]() {
		return "a duration (e.g. 250ms, 1m)"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	default:
		return "a mapping"
	}
}

// record remembers where path was first written.
func (s *source) record(path string, n *yaml.Node) {
	if _, ok := s.pos[path]; !ok {
		s.pos[path] = position{n.Line, n.Column}
	}
}

// expand replaces ${NAME} and ${NAME:-default} in a scalar value; "$${"
// writes a literal "${". It remembers that path came from the environment.
func (s *source) expand(n *yaml.Node, path string, lookupEnv func(string) (string, bool)) error {
	out, used, err := expandEnv(n.Value, lookupEnv)
	if err != nil {
		return err
	}
	raw := n.Value
	n.Value = out
	if used {
		s.fromEnv[path] = true
		s.raw[path] = raw
		if n.Style == 0 && n.Tag == "!!str" {
			n.Tag = "" // let the expanded value resolve as a number or bool
		}
	}
	return nil
}

// expandEnv expands ${NAME} and ${NAME:-default} in s. used reports whether
// any reference was expanded.
func expandEnv(s string, lookup func(string) (string, bool)) (out string, used bool, err error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), used, nil
		}
		if i > 0 && s[i-1] == '$' { // "$${" is a literal "${"
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", false, errors.New("unterminated ${ in value")
		}
		ref := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(ref, ":-")
		if !validEnvName(name) {
			return "", false, fmt.Errorf("${%s}: %q is not an environment variable name", ref, name)
		}
		used = true
		if v, ok := lookup(name); ok {
			b.WriteString(v)
		} else if hasDef {
			b.WriteString(def)
		} else {
			return "", false, fmt.Errorf("environment variable %s is not set (write ${%s:-default} for a default)", name, name)
		}
	}
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// quote is strconv.Quote, named for readability in messages.
func quote(s string) string { return strconv.Quote(s) }

// isObjectStorage reports whether a model repository is an object-storage
// location (s3://, gs://, as://) rather than a folder.
func isObjectStorage(r string) bool {
	return strings.HasPrefix(r, "s3://") || strings.HasPrefix(r, "gs://") || strings.HasPrefix(r, "as://")
}
