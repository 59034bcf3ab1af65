package diff

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Defaults used by Analyze for zero-valued Options fields.
const (
	// DefaultThreshold is the |Δ| above which one request's output counts
	// as a significant deviation.
	DefaultThreshold = 0.15
	// DefaultMaxSignificantShare is the share of compared requests that
	// may deviate significantly before the significant_share gate fails:
	// 1 %, small enough that a replay of the same model (0 %) passes and a
	// regression confined to one region of a few percent of traffic fails.
	DefaultMaxSignificantShare = 0.01
	// DefaultKSAlpha is the KS p-value below which the ks gate fails.
	DefaultKSAlpha = 0.01
	// DefaultKSMinEffectSigma is the ks gate's default minimum effect, in
	// standard deviations of the stable side (A) of each output: 0.1 σ is
	// large for a 0–1 score (σ 0.2: 0.02) and tiny against an ETA in
	// minutes (σ 8: 0.8), so one default fits outputs of any scale.
	DefaultKSMinEffectSigma = 0.1
	// DefaultMinLatencySliceCount is how many requests each side of a
	// slice needs before its p95 latency is gated: 100 leaves five
	// requests above the p95, so one slow request does not decide it.
	DefaultMinLatencySliceCount = 100
	// DefaultMaxP95Regression is the relative p95 latency increase of B
	// over A above which the latency_p95 gate fails.
	DefaultMaxP95Regression = 0.10
	// DefaultMaxErrorRateIncrease is how much B's error rate may exceed
	// A's (absolute, 0.01 = one percentage point) before the error_rate
	// gate fails. Without it a shadow that fails every request would have
	// nothing to compare and pass every other gate.
	DefaultMaxErrorRateIncrease = 0.01
	// DefaultWorstN is the number of worst examples kept per output.
	DefaultWorstN = 20
	// DefaultMissingSliceWarn is the share of records missing a slice key
	// above which the report warns.
	DefaultMissingSliceWarn = 0.5
	// DefaultMinSliceCount is the number of compared requests a slice
	// needs before its gates count; smaller slices are reported only.
	DefaultMinSliceCount = 20
	// DefaultBins is the number of histogram bins per output.
	DefaultBins = 30
	// DefaultRelativeFloor is the smallest |A| a relative Δ divides by.
	DefaultRelativeFloor = 1e-9
)

// Options configure Analyze. The zero value uses every default. Numeric
// gate limits use 0 for "default"; a negative limit disables its gate.
type Options struct {
	// Outputs are the output names to compare. Empty means every numeric
	// output that both arms of some compared request returned.
	Outputs []string
	// Threshold is the |Δ| above which a request's output deviates
	// significantly (default 0.15). Δ is B − A, or (B − A)/|A| when
	// Relative is set.
	Threshold float64
	// Relative switches Δ to the relative difference (B − A)/max(|A|,
	// RelativeFloor).
	Relative bool
	// RelativeFloor keeps relative Δ finite when A is 0 (default 1e-9).
	RelativeFloor float64
	// MaxSignificantShare is the significant_share gate: the largest
	// allowed share of compared requests with |Δ| > Threshold (default
	// 0.01). Negative disables the gate.
	MaxSignificantShare float64
	// KSAlpha is the ks gate: a KS p-value below it fails (default 0.01).
	// Negative disables the gate.
	KSAlpha float64
	// KSMinEffect is the ks gate's minimum effect size for every output,
	// in output units: the gate fails only when, besides p < KSAlpha, the
	// two distributions are further apart than this: the mean absolute
	// difference of their percentiles (1st to 99th, an estimate of the
	// Wasserstein distance; relative to |A|'s percentile with Relative).
	// With many requests KS finds differences too small to matter.
	// 0: KSMinEffectSigma standard deviations of side A's values of the
	// output; negative: any difference.
	KSMinEffect float64
	// KSMinEffectSigma is the default minimum effect in standard
	// deviations of side A (the stable arm) of each output (default 0.1),
	// used where neither KSMinEffect nor MinEffects sets one.
	KSMinEffectSigma float64
	// MinEffects set the minimum effect of single outputs, overriding
	// KSMinEffect and KSMinEffectSigma.
	MinEffects map[string]MinEffect
	// KSReportOnly keeps the ks gate from failing: a significant shift
	// above the minimum effect is still reported, as a warning and in the
	// gate's message, but the analysis passes.
	KSReportOnly bool
	// MinLatencySliceCount is how many requests each side of a slice
	// needs for its latency_p95 gate to count (default 100); smaller
	// slices report their latency only.
	MinLatencySliceCount int
	// MaxP95Regression is the latency_p95 gate: (p95_B − p95_A)/p95_A
	// above it fails (default 0.10). Negative disables the gate.
	MaxP95Regression float64
	// MinP95IncreaseMS is an absolute floor for the latency_p95 gate: the
	// p95 must also grow by more than this many milliseconds, so jitter on
	// sub-millisecond models is not a regression (default 0: off).
	MinP95IncreaseMS float64
	// MaxErrorRateIncrease is the error_rate gate: B's error rate may
	// exceed A's by at most this much (default 0.01). Negative disables
	// the gate.
	MaxErrorRateIncrease float64
	// Slices are the keys the figures are broken down by.
	Slices []SliceKey
	// MinSliceCount is how many compared requests a slice needs for its
	// gates to count (default 20).
	MinSliceCount int
	// MissingSliceWarn is the share of records without a slice key above
	// which a warning is reported (default 0.5).
	MissingSliceWarn float64
	// WorstN is how many worst examples are kept per output (default 20;
	// negative keeps none).
	WorstN int
	// Bins is the number of histogram bins (default 30).
	Bins int
}

// withDefaults returns o with zero fields replaced by their defaults.
func (o Options) withDefaults() Options {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Threshold, DefaultThreshold)
	def(&o.RelativeFloor, DefaultRelativeFloor)
	def(&o.MaxSignificantShare, DefaultMaxSignificantShare)
	def(&o.KSAlpha, DefaultKSAlpha)
	def(&o.KSMinEffectSigma, DefaultKSMinEffectSigma)
	if o.MinLatencySliceCount == 0 {
		o.MinLatencySliceCount = DefaultMinLatencySliceCount
	}
	def(&o.MaxP95Regression, DefaultMaxP95Regression)
	def(&o.MaxErrorRateIncrease, DefaultMaxErrorRateIncrease)
	def(&o.MissingSliceWarn, DefaultMissingSliceWarn)
	if o.MinSliceCount == 0 {
		o.MinSliceCount = DefaultMinSliceCount
	}
	if o.WorstN == 0 {
		o.WorstN = DefaultWorstN
	}
	if o.Bins == 0 {
		o.Bins = DefaultBins
	}
	return o
}

// Validate reports every invalid field at once.
func (o Options) Validate() error {
	var errs []error
	finite := func(name string, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("%s must be finite", name))
		}
	}
	finite("threshold", o.Threshold)
	finite("relative floor", o.RelativeFloor)
	finite("max significant share", o.MaxSignificantShare)
	finite("ks alpha", o.KSAlpha)
	finite("ks min effect", o.KSMinEffect)
	finite("ks min effect sigma", o.KSMinEffectSigma)
	if o.KSMinEffectSigma < 0 {
		errs = append(errs, errors.New("ks min effect sigma must not be negative"))
	}
	for _, name := range slices.Sorted(maps.Keys(o.MinEffects)) {
		m := o.MinEffects[name]
		switch {
		case name == "":
			errs = append(errs, errors.New("min effect: empty output name"))
		case math.IsNaN(m.Absolute) || math.IsInf(m.Absolute, 0) || math.IsNaN(m.Sigma) || math.IsInf(m.Sigma, 0):
			errs = append(errs, fmt.Errorf("min effect of %s must be finite", name))
		case m.Sigma < 0 || (m.Absolute != 0 && m.Sigma != 0):
			errs = append(errs, fmt.Errorf("min effect of %s: give an absolute value or a non-negative number of σ, not both", name))
		}
	}
	finite("max p95 regression", o.MaxP95Regression)
	finite("min p95 increase", o.MinP95IncreaseMS)
	finite("max error rate increase", o.MaxErrorRateIncrease)
	finite("missing slice warn", o.MissingSliceWarn)
	if o.Threshold < 0 {
		errs = append(errs, errors.New("threshold must not be negative"))
	}
	if o.RelativeFloor < 0 {
		errs = append(errs, errors.New("relative floor must not be negative"))
	}
	if o.KSAlpha > 1 {
		errs = append(errs, errors.New("ks alpha must not exceed 1"))
	}
	if o.MinLatencySliceCount < 0 {
		errs = append(errs, errors.New("min latency slice count must not be negative"))
	}
	if o.MinSliceCount < 0 {
		errs = append(errs, errors.New("min slice count must not be negative"))
	}
	if o.Bins < 0 || o.Bins > 1000 {
		errs = append(errs, fmt.Errorf("bins %d outside [1,1000]", o.Bins))
	}
	seen := map[string]bool{}
	for i, k := range o.Slices {
		if err := k.validate(); err != nil {
			errs = append(errs, fmt.Errorf("slices[%d]: %w", i, err))
		}
		// Gate ids name a slice by key name, so names must be unique.
		if seen[k.Name] {
			errs = append(errs, fmt.Errorf("slices[%d]: duplicate key %s", i, k.Name))
		}
		seen[k.Name] = true
	}
	for i, name := range o.Outputs {
		if name == "" {
			errs = append(errs, fmt.Errorf("outputs[%d]: empty name", i))
		}
	}
	return errors.Join(errs...)
}

// MinEffect is one output's minimum effect for the ks gate: Absolute in
// output units (negative: any difference), or else Sigma standard
// deviations of side A's values.
type MinEffect struct {
	Absolute float64 `json:"absolute,omitempty"`
	Sigma    float64 `json:"sigma,omitempty"`
}

// String formats m as ParseMinEffect reads it.
func (m MinEffect) String() string {
	if m.Absolute != 0 {
		return strconv.FormatFloat(m.Absolute, 'g', -1, 64)
	}
	return strconv.FormatFloat(m.Sigma, 'g', -1, 64) + "sigma"
}

// ParseMinEffect reads "OUTPUT=VALUE" (absolute, in output units) or
// "OUTPUT=VALUEsigma" (VALUE standard deviations of side A; "σ" and "sd"
// are accepted for "sigma").
func ParseMinEffect(s string) (string, MinEffect, error) {
	name, v, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", MinEffect{}, fmt.Errorf("min effect %q: want OUTPUT=VALUE or OUTPUT=VALUEsigma", s)
	}
	v = strings.TrimSpace(v)
	sigma := false
	for _, suf := range []string{"sigma", "σ", "sd"} {
		if t, found := strings.CutSuffix(v, suf); found {
			v, sigma = strings.TrimSpace(t), true
			break
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return "", MinEffect{}, fmt.Errorf("min effect %q: %q is not a finite number", s, v)
	}
	if sigma {
		if f < 0 {
			return "", MinEffect{}, fmt.Errorf("min effect %q: a number of σ must not be negative", s)
		}
		if f == 0 {
			return name, MinEffect{Absolute: -1}, nil // 0 σ: any difference
		}
		return name, MinEffect{Sigma: f}, nil
	}
	if f == 0 {
		f = -1 // 0: any difference, as a negative value
	}
	return name, MinEffect{Absolute: f}, nil
}

// minEffect is the ks gate's minimum effect for one output, given side
// A's summary of it (overall, not per slice).
func (o Options) minEffect(output string, a Summary) float64 {
	spread := a.Std
	if o.Relative {
		spread = a.Std / max(math.Abs(a.Mean), o.RelativeFloor)
	}
	if m, ok := o.MinEffects[output]; ok {
		if m.Absolute != 0 {
			return m.Absolute
		}
		return finite(m.Sigma * spread)
	}
	if o.KSMinEffect != 0 {
		return o.KSMinEffect
	}
	return finite(o.KSMinEffectSigma * spread)
}

// SliceSource says where a slice key's value is looked up in a record.
type SliceSource string

// Slice sources. SourceAuto looks in headers, then features, then the
// request body, and uses the first that has the key.
const (
	SourceAuto    SliceSource = ""
	SourceHeader  SliceSource = "header"
	SourceFeature SliceSource = "feature"
	SourceRequest SliceSource = "request"
)

// SliceKey is one dimension the figures are broken down by.
//
// String values form one slice each. Numeric values are bucketed by
// Edges: buckets (-inf,e0), [e0,e1), …, [en,+inf). Without Edges a key
// with at most 12 distinct numbers gets one slice per number, and one with
// more gets four quartile buckets computed from the data. Records without
// the key form the "(missing)" slice.
type SliceKey struct {
	// Source is where the key is looked up (SourceAuto: header, feature,
	// request, in that order).
	Source SliceSource `json:"source,omitempty"`
	// Name is the header name (case-insensitive), feature reference
	// (e.g. route_features__distance_km) or request field.
	Name string `json:"name"`
	// Edges are ascending bucket boundaries for numeric values.
	Edges []float64 `json:"edges,omitempty"`
}

// String formats k in the syntax ParseSliceKey accepts.
func (k SliceKey) String() string {
	var b strings.Builder
	if k.Source != SourceAuto {
		b.WriteString(string(k.Source))
		b.WriteByte(':')
	}
	b.WriteString(k.Name)
	if len(k.Edges) > 0 {
		b.WriteByte('@')
		for i, e := range k.Edges {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatFloat(e, 'g', -1, 64))
		}
	}
	return b.String()
}

func (k SliceKey) validate() error {
	switch k.Source {
	case SourceAuto, SourceHeader, SourceFeature, SourceRequest:
	default:
		return fmt.Errorf("unknown slice source %q (want header, feature or request)", k.Source)
	}
	if strings.TrimSpace(k.Name) == "" {
		return errors.New("empty slice key name")
	}
	for i, e := range k.Edges {
		if math.IsNaN(e) || math.IsInf(e, 0) {
			return fmt.Errorf("edge %d is not finite", i)
		}
		if i > 0 && e <= k.Edges[i-1] {
			return errors.New("edges must be strictly ascending")
		}
	}
	return nil
}

// ParseSliceKey parses "[source:]name[@edge,edge,…]", e.g. "x-region",
// "header:x-user-type", "feature:route_features__distance_km@2,5,10" or
// "request:base_eta". Header names are lower-cased.
func ParseSliceKey(s string) (SliceKey, error) {
	var k SliceKey
	rest := strings.TrimSpace(s)
	if src, name, ok := strings.Cut(rest, ":"); ok {
		k.Source = SliceSource(strings.ToLower(strings.TrimSpace(src)))
		if k.Source == SourceAuto {
			return SliceKey{}, fmt.Errorf("slice key %q: empty source before ':'", s)
		}
		rest = name
	}
	name, edges, hasEdges := strings.Cut(rest, "@")
	k.Name = strings.TrimSpace(name)
	if hasEdges {
		for f := range strings.SplitSeq(edges, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil {
				return SliceKey{}, fmt.Errorf("slice key %q: edge %q is not a number", s, f)
			}
			k.Edges = append(k.Edges, v)
		}
	}
	if k.Source == SourceHeader {
		// Records carry lower-case header names. Features and request
		// fields are case-sensitive, so an auto key keeps the name as
		// written and is lower-cased only for its header lookup.
		k.Name = strings.ToLower(k.Name)
	}
	if err := k.validate(); err != nil {
		return SliceKey{}, fmt.Errorf("slice key %q: %w", s, err)
	}
	return k, nil
}
