package drift

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Kind tells numeric variables from categorical ones.
type Kind string

// The kinds of variable.
const (
	// Numeric variables are compared by binned PSI and the KS test.
	Numeric Kind = "numeric"
	// Categorical variables are compared by PSI over their categories plus
	// one implicit "other" category for every value not listed.
	Categorical Kind = "categorical"
)

// Limits on a reference, which bound the memory and the work of a check.
const (
	MaxNameLen    = 128
	MaxBins       = 1000
	MaxCategories = 1000
	MaxQuantiles  = 10001
	MaxVariables  = 4096
	// MaxFileSize bounds a reference file read by LoadReferences.
	MaxFileSize = 64 << 20
)

// DefaultBins is the number of equal-mass bins derived from quantiles or
// from a recorded sample.
const DefaultBins = 10

// recordedQuantiles is the number of quantiles kept from a recorded period
// (percentiles 0…100) when it is written to a file.
const recordedQuantiles = 101

// proportionTolerance is how far numeric proportions may sum from 1
// (and categorical ones above 1): statistics exported with rounding.
const proportionTolerance = 1e-3

// Reference describes the expected distribution of one variable: what the
// live window is compared with. It comes from a reference file (training
// data statistics, see ParseReferences) or from a recorded period
// (NewReference, Monitor.Record). A Reference must not be modified once it
// is given to a Monitor.
type Reference struct {
	// Name is the variable's name (a feature or an output).
	Name string `json:"name" yaml:"name"`
	// Kind is Numeric (the default when empty) or Categorical.
	Kind Kind `json:"kind,omitempty" yaml:"kind,omitempty"`
	// Count is the number of observations the statistics summarise. It is
	// the reference's sample size in the KS p-value; 0 treats the reference
	// as the exact distribution (a one-sample test).
	Count int64 `json:"count,omitempty" yaml:"count,omitempty"`
	// Edges are a numeric variable's interior bin edges, strictly
	// increasing: n edges make n+1 bins (−∞, e₀), [e₀, e₁), …, [eₙ₋₁, +∞).
	Edges []float64 `json:"edges,omitempty" yaml:"edges,omitempty,flow"`
	// Proportions are the share of observations in each bin (numeric:
	// len(Edges)+1 values summing to 1) or in each category (categorical:
	// one per category, summing to at most 1; the rest is "other").
	Proportions []float64 `json:"proportions,omitempty" yaml:"proportions,omitempty,flow"`
	// Categories are a categorical variable's known values.
	Categories []string `json:"categories,omitempty" yaml:"categories,omitempty,flow"`
	// Quantiles are a numeric variable's quantiles at evenly spaced
	// probabilities: Quantiles[j] at j/(len−1), so the first is the minimum
	// and the last the maximum; non-decreasing. They give the reference
	// distribution function for the KS test (linear between quantiles) and,
	// when Edges are absent, DefaultBins equal-mass bins for PSI.
	Quantiles []float64 `json:"quantiles,omitempty" yaml:"quantiles,omitempty,flow"`

	// sample is the exact recorded sample, when built from one: the KS
	// test then compares two samples.
	sample *ecdf
}

// referenceFile is the document ParseReferences reads.
type referenceFile struct {
	Version   int          `yaml:"version"`
	Variables []*Reference `yaml:"variables"`
}

// fileVersion is the only reference file version.
const fileVersion = 1

// ParseReferences reads a reference file, YAML or JSON (JSON is read as
// YAML). Unknown fields, a second document, a missing or unknown version
// and invalid statistics are errors, all reported at once. See the package
// documentation for the format.
func ParseReferences(data []byte) ([]*Reference, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f referenceFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty reference file")
		}
		return nil, fmt.Errorf("parse reference file: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse reference file: want a single document")
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("reference file version %d: want %d", f.Version, fileVersion)
	}
	if err := validateSet(f.Variables); err != nil {
		return nil, err
	}
	for _, r := range f.Variables {
		r.normalize()
	}
	return f.Variables, nil
}

// LoadReferences reads and parses the reference file at path (at most
// MaxFileSize bytes).
func LoadReferences(path string) ([]*Reference, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *PathError names the file
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, MaxFileSize)
	}
	refs, err := ParseReferences(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return refs, nil
}

// MarshalReferences writes refs as a reference file (YAML) that
// ParseReferences reads back. A recorded sample is written as its
// quantiles.
func MarshalReferences(refs []*Reference) ([]byte, error) {
	if err := validateSet(refs); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(referenceFile{Version: fileVersion, Variables: refs}); err != nil {
		return nil, fmt.Errorf("encode reference file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode reference file: %w", err)
	}
	return buf.Bytes(), nil
}

func validateSet(refs []*Reference) error {
	if len(refs) == 0 {
		return errors.New("reference file: no variables")
	}
	if len(refs) > MaxVariables {
		return fmt.Errorf("reference file: %d variables, at most %d", len(refs), MaxVariables)
	}
	var errs []error
	seen := make(map[string]bool, len(refs))
	for i, r := range refs {
		if r == nil {
			errs = append(errs, fmt.Errorf("variables[%d]: empty", i))
			continue
		}
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("variables[%d]: %w", i, err))
		}
		if seen[r.Name] {
			errs = append(errs, fmt.Errorf("variables[%d]: duplicate name %q", i, r.Name))
		}
		seen[r.Name] = true
	}
	return errors.Join(errs...)
}

// normalize gives parsed references one representation: an empty kind is
// Numeric and empty lists are nil.
func (r *Reference) normalize() {
	if r.Kind == "" {
		r.Kind = Numeric
	}
	if len(r.Edges) == 0 {
		r.Edges = nil
	}
	if len(r.Proportions) == 0 {
		r.Proportions = nil
	}
	if len(r.Categories) == 0 {
		r.Categories = nil
	}
	if len(r.Quantiles) == 0 {
		r.Quantiles = nil
	}
}

// checkName reports whether s is a usable variable or category name:
// non-empty, at most MaxNameLen bytes of printable UTF-8.
func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > MaxNameLen:
		return fmt.Errorf("longer than %d bytes", MaxNameLen)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return fmt.Errorf("unprintable character %U", c)
		}
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate reports every problem of r at once, prefixed by its name.
func (r *Reference) Validate() error {
	v := &refErrors{}
	if err := checkName(r.Name); err != nil {
		v.add("name: %w", err)
	}
	if r.Count < 0 {
		v.add("count %d: want ≥ 0", r.Count)
	}
	for i, p := range r.Proportions {
		if !finite(p) || p < 0 {
			v.add("proportions[%d] = %v: want a finite value ≥ 0", i, p)
		}
	}
	sum := 0.0
	for _, p := range r.Proportions {
		sum += p
	}
	switch r.Kind {
	case "", Numeric:
		v.numeric(r, sum)
	case Categorical:
		v.categorical(r, sum)
	default:
		v.add("kind %q: want numeric or categorical", r.Kind)
	}
	if err := errors.Join(v.errs...); err != nil {
		return fmt.Errorf("%q: %w", r.Name, err)
	}
	return nil
}

// refErrors collects a Reference's problems.
type refErrors struct{ errs []error }

func (v *refErrors) add(format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf(format, args...))
}

// numeric checks a numeric reference's bins and quantiles; sum is the
// sum of its proportions.
func (v *refErrors) numeric(r *Reference, sum float64) {
	if len(r.Categories) > 0 {
		v.add("categories: only for a categorical variable")
	}
	if len(r.Edges) == 0 && len(r.Proportions) == 0 && len(r.Quantiles) == 0 {
		v.add("want edges and proportions, or quantiles")
	}
	if len(r.Edges) > 0 || len(r.Proportions) > 0 {
		switch {
		case len(r.Edges) == 0:
			v.add("edges: want at least one with proportions")
		case len(r.Edges) > MaxBins:
			v.add("edges: %d, at most %d", len(r.Edges), MaxBins)
		case len(r.Proportions) != len(r.Edges)+1:
			v.add("proportions: %d for %d edges, want %d", len(r.Proportions), len(r.Edges), len(r.Edges)+1)
		case math.Abs(sum-1) > proportionTolerance:
			v.add("proportions sum to %v, want 1", sum)
		}
		for i, e := range r.Edges {
			switch {
			case !finite(e):
				v.add("edges[%d] = %v: want a finite value", i, e)
			case i > 0 && !(e > r.Edges[i-1]):
				v.add("edges[%d] = %v: want strictly increasing edges", i, e)
			}
		}
	}
	if len(r.Quantiles) > 0 {
		if len(r.Quantiles) < 2 || len(r.Quantiles) > MaxQuantiles {
			v.add("quantiles: %d, want 2 to %d", len(r.Quantiles), MaxQuantiles)
		}
		for i, q := range r.Quantiles {
			switch {
			case !finite(q):
				v.add("quantiles[%d] = %v: want a finite value", i, q)
			case i > 0 && q < r.Quantiles[i-1]:
				v.add("quantiles[%d] = %v: want non-decreasing quantiles", i, q)
			}
		}
	}
}

// categorical checks a categorical reference; sum is the sum of its
// proportions.
func (v *refErrors) categorical(r *Reference, sum float64) {
	if len(r.Edges) > 0 || len(r.Quantiles) > 0 {
		v.add("edges and quantiles: only for a numeric variable")
	}
	if len(r.Categories) == 0 || len(r.Categories) > MaxCategories {
		v.add("categories: %d, want 1 to %d", len(r.Categories), MaxCategories)
	}
	if len(r.Proportions) != len(r.Categories) {
		v.add("proportions: %d for %d categories", len(r.Proportions), len(r.Categories))
	}
	if sum > 1+proportionTolerance {
		v.add("proportions sum to %v, want at most 1", sum)
	}
	seen := make(map[string]bool, len(r.Categories))
	for i, c := range r.Categories {
		if err := checkName(c); err != nil {
			v.add("categories[%d]: %w", i, err)
		}
		if seen[c] {
			v.add("categories[%d]: duplicate %q", i, c)
		}
		seen[c] = true
	}
}

// NewReference builds a numeric reference from a recorded sample: bins
// equal-mass bins (DefaultBins when bins ≤ 0; fewer where values repeat),
// 101 quantiles, and the sample itself for an exact two-sample KS test.
// NaN and ±Inf values are ignored; values is not modified.
func NewReference(name string, values []float64, bins int) (*Reference, error) {
	pts := make([]point, 0, len(values))
	for _, v := range values {
		if finite(v) {
			pts = append(pts, point{v: v, w: 1})
		}
	}
	return referenceFromPoints(name, pts, bins)
}

// referenceFromPoints builds a numeric reference from weighted points,
// which it sorts.
func referenceFromPoints(name string, pts []point, bins int) (*Reference, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("reference name: %w", err)
	}
	if bins <= 0 {
		bins = DefaultBins
	}
	bins = min(bins, MaxBins+1)
	e := newECDF(pts)
	if e == nil {
		return nil, fmt.Errorf("reference %q: no values", name)
	}
	r := &Reference{Name: name, Kind: Numeric, Count: int64(math.Round(e.neff)), sample: e}
	r.Edges = equalMassEdges(bins, e.quantile)
	if len(r.Edges) == 0 {
		// A constant sample: one edge at the value splits "below" from it.
		r.Edges = []float64{e.v[0]}
	}
	r.Proportions = binProportions(e, r.Edges, nil)
	r.Quantiles = make([]float64, recordedQuantiles)
	for j := range r.Quantiles {
		r.Quantiles[j] = e.quantile(float64(j) / float64(recordedQuantiles-1))
	}
	return r, nil
}

// NewCategoricalReference builds a categorical reference from counts per
// category (a recorded period). Categories with a zero count are kept:
// their absence is part of the reference.
func NewCategoricalReference(name string, categories []string, counts []int64) (*Reference, error) {
	if len(categories) != len(counts) {
		return nil, fmt.Errorf("reference %q: %d categories, %d counts", name, len(categories), len(counts))
	}
	var total int64
	for _, c := range counts {
		if c < 0 {
			return nil, fmt.Errorf("reference %q: negative count", name)
		}
		total += c
	}
	if total == 0 {
		return nil, fmt.Errorf("reference %q: no values", name)
	}
	r := &Reference{
		Name: name, Kind: Categorical, Count: total,
		Categories:  append([]string(nil), categories...),
		Proportions: make([]float64, len(counts)),
	}
	for i, c := range counts {
		r.Proportions[i] = float64(c) / float64(total)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// compiled is a reference prepared for one variable's checks.
type compiled struct {
	ref   *Reference
	edges []float64 // numeric bins; nil when PSI is unavailable
	props []float64 // expected proportions: bins, or categories + other
	dist  cdf       // numeric distribution function; nil when KS is unavailable
	size  float64   // reference sample size for the KS p-value; 0 = exact
}

// compile validates r and prepares it for a variable whose categories (for
// a categorical variable) are cats, in that order.
func (r *Reference) compile(cats []string) (*compiled, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	c := &compiled{ref: r, size: float64(r.Count)}
	if r.Kind == Categorical {
		byName := make(map[string]float64, len(r.Categories))
		for i, name := range r.Categories {
			byName[name] = r.Proportions[i]
		}
		c.props = make([]float64, len(cats)+1)
		sum := 0.0
		for i, name := range cats {
			c.props[i] = byName[name]
			sum += c.props[i]
		}
		c.props[len(cats)] = max(1-sum, 0)
		return c, nil
	}
	switch {
	case r.sample != nil:
		c.dist, c.size = r.sample, r.sample.neff
	case len(r.Quantiles) > 0:
		c.dist = quantileCDF{q: r.Quantiles}
	}
	if len(r.Edges) > 0 {
		c.edges = r.Edges
		c.props = r.Proportions
	} else if q, ok := c.dist.(quantileCDF); ok {
		c.edges = equalMassEdges(DefaultBins, q.value)
		if len(c.edges) == 0 {
			c.edges = []float64{q.q[0]}
		}
		c.props = binProportions(q, c.edges, nil)
	}
	return c, nil
}
