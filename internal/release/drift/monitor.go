package drift

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/release/ks"
)

// Defaults for Options.
const (
	DefaultMinSamples = 100
	DefaultInterval   = 30 * time.Second
)

// Options configures a Monitor. Zero values take the defaults.
type Options struct {
	// Window configures every variable's live window.
	Window WindowOptions
	// PSIThreshold is the PSI at or above which a variable drifts
	// (default PSISignificant, 0.25).
	PSIThreshold float64
	// KSAlpha is the KS p-value below which a numeric variable drifts
	// (default DefaultKSAlpha, 0.01).
	KSAlpha float64
	// Epsilon is the PSI smoothing (default DefaultEpsilon).
	Epsilon float64
	// MinSamples is the number of live observations below which a variable
	// is not judged (default 100): its statistics are NaN and its gauges
	// and events are left as they were.
	MinSamples int64
	// Bins is the number of equal-mass bins of a recorded reference and of
	// Rank's comparisons (default DefaultBins).
	Bins int
	// Interval is Run's period between checks (default 30 s).
	Interval time.Duration
}

func (o *Options) defaults() {
	if o.PSIThreshold <= 0 {
		o.PSIThreshold = PSISignificant
	}
	if o.KSAlpha <= 0 {
		o.KSAlpha = DefaultKSAlpha
	}
	if o.Epsilon <= 0 {
		o.Epsilon = DefaultEpsilon
	}
	if o.MinSamples <= 0 {
		o.MinSamples = DefaultMinSamples
	}
	if o.Bins <= 1 {
		o.Bins = DefaultBins
	}
	o.Bins = min(o.Bins, MaxBins+1)
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
}

// Variable declares one monitored variable. The set of variables, and so
// the metrics' label values, comes from configuration only: observations of
// undeclared names are ignored.
type Variable struct {
	// Name is the feature or output name.
	Name string
	// Kind is Numeric or Categorical; empty takes the reference's kind, or
	// Numeric without one.
	Kind Kind
	// Categories are a categorical variable's known values (values outside
	// them count as "other"); empty takes the reference's categories.
	Categories []string
	// Reference is the expected distribution; nil until SetReference (for
	// example after Record), and such a variable is not checked.
	Reference *Reference
}

// Result is the comparison of one variable's live window with its
// reference (Check) or of two groups' windows (Rank).
type Result struct {
	// Name is the variable's name and Kind its kind.
	Name string
	Kind Kind
	// Samples is the number of live observations compared (for Rank: the
	// first group's), and BaseSamples the other side's (the reference's
	// Count, or the stable groups' observations).
	Samples, BaseSamples int64
	// PSI is the population stability index; NaN when not computed.
	PSI float64
	// KS is the Kolmogorov–Smirnov statistic D and PValue its asymptotic
	// p-value; NaN when not computed and for categorical variables.
	KS, PValue float64
	// Drifting reports that PSI reached the PSI threshold or PValue fell
	// below the KS significance level.
	Drifting bool
	// Skip says why the statistics were not computed; empty when they were.
	Skip string
}

// Reasons for a skipped Result.
const (
	SkipNoReference = "no reference"
	SkipFewSamples  = "too few samples"
)

// Monitor watches many variables of one scope (a service's inputs or
// outputs, or one rollout group): a live Window and an optional Reference
// per variable. Observe is safe for concurrent use and does not allocate;
// Check compares each window with its reference, exports the statistics
// and counts threshold crossings.
type Monitor struct {
	scope string
	opts  Options
	log   *slog.Logger
	m     *metrics // nil without a registerer
	vars  map[string]*variable
	order []*variable // configuration order

	mu   sync.Mutex // protects the variables' alert state and last
	last []Result
}

// variable is the per-variable state. name, kind, cats, catIndex and win are
// fixed at construction.
type variable struct {
	name     string
	kind     Kind
	cats     []string
	catIndex map[string]int
	win      *Window
	ref      atomic.Pointer[compiled]

	psiHigh, ksHigh bool // guarded by Monitor.mu
}

// NewMonitor builds a monitor for scope (a label value naming what is
// watched, unique per registry) over vars. A nil logger discards; a nil
// registerer leaves the metrics unregistered (nothing is exported).
// Several monitors may share a registerer.
func NewMonitor(scope string, vars []Variable, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Monitor, error) {
	if err := checkName(scope); err != nil {
		return nil, fmt.Errorf("drift scope: %w", err)
	}
	if len(vars) > MaxVariables {
		return nil, fmt.Errorf("drift scope %q: %d variables, at most %d", scope, len(vars), MaxVariables)
	}
	opts.defaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Monitor{
		scope: scope,
		opts:  opts,
		log:   logger.With("component", "drift", "scope", scope),
		vars:  make(map[string]*variable, len(vars)),
	}
	var errs []error
	for i, spec := range vars {
		v, err := m.newVariable(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("variables[%d]: %w", i, err))
			continue
		}
		if m.vars[v.name] != nil {
			errs = append(errs, fmt.Errorf("variables[%d]: duplicate name %q", i, v.name))
			continue
		}
		m.vars[v.name] = v
		m.order = append(m.order, v)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("drift scope %q: %w", scope, err)
	}
	if reg != nil {
		m.m = newMetrics(reg)
		for _, v := range m.order {
			m.m.events.WithLabelValues(scope, v.name, eventPSI).Add(0)
			if v.kind == Numeric {
				m.m.events.WithLabelValues(scope, v.name, eventKS).Add(0)
			}
		}
	}
	return m, nil
}

func (m *Monitor) newVariable(spec Variable) (*variable, error) {
	if err := checkName(spec.Name); err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	kind, cats := spec.Kind, spec.Categories
	if r := spec.Reference; r != nil {
		if r.Name != spec.Name {
			return nil, fmt.Errorf("%q: reference is for %q", spec.Name, r.Name)
		}
		rk := cmp.Or(r.Kind, Numeric)
		if kind == "" {
			kind = rk
		}
		if kind != rk {
			return nil, fmt.Errorf("%q: %s variable with a %s reference", spec.Name, kind, rk)
		}
		if len(cats) == 0 {
			cats = r.Categories
		}
	}
	kind = cmp.Or(kind, Numeric)
	v := &variable{name: spec.Name, kind: kind}
	switch kind {
	case Numeric:
		if len(cats) > 0 {
			return nil, fmt.Errorf("%q: categories for a numeric variable", spec.Name)
		}
	case Categorical:
		if len(cats) == 0 || len(cats) > MaxCategories {
			return nil, fmt.Errorf("%q: %d categories, want 1 to %d", spec.Name, len(cats), MaxCategories)
		}
		v.cats = slices.Clone(cats)
		v.catIndex = make(map[string]int, len(cats))
		for i, c := range cats {
			if err := checkName(c); err != nil {
				return nil, fmt.Errorf("%q: categories[%d]: %w", spec.Name, i, err)
			}
			if _, dup := v.catIndex[c]; dup {
				return nil, fmt.Errorf("%q: duplicate category %q", spec.Name, c)
			}
			v.catIndex[c] = i
		}
	default:
		return nil, fmt.Errorf("%q: kind %q: want numeric or categorical", spec.Name, kind)
	}
	if spec.Reference != nil {
		c, err := spec.Reference.compile(v.cats)
		if err != nil {
			return nil, err
		}
		v.ref.Store(c)
	}
	v.win = NewWindow(m.opts.Window)
	return v, nil
}

// Scope returns the monitor's scope.
func (m *Monitor) Scope() string { return m.scope }

// Names returns the variables' names in configuration order.
func (m *Monitor) Names() []string {
	names := make([]string, len(m.order))
	for i, v := range m.order {
		names[i] = v.name
	}
	return names
}

// Observe records a value of the numeric variable name. It reports false,
// and records nothing, for an undeclared or categorical variable. It does
// not allocate.
func (m *Monitor) Observe(name string, value float64) bool {
	v := m.vars[name]
	if v == nil || v.kind != Numeric {
		return false
	}
	v.win.Observe(value)
	return true
}

// ObserveAt is Observe at time t (see Window.ObserveAt): a request handler
// that has already read the clock records all its values without reading
// it again.
func (m *Monitor) ObserveAt(name string, value float64, t time.Time) bool {
	v := m.vars[name]
	if v == nil || v.kind != Numeric {
		return false
	}
	v.win.ObserveAt(value, t)
	return true
}

// ObserveCategory records a value of the categorical variable name; a
// value outside its categories counts as "other". It reports false, and
// records nothing, for an undeclared or numeric variable. It does not
// allocate.
func (m *Monitor) ObserveCategory(name, value string) bool {
	v, i := m.category(name, value)
	if v == nil {
		return false
	}
	v.win.Observe(i)
	return true
}

// ObserveCategoryAt is ObserveCategory at time t (see Window.ObserveAt).
func (m *Monitor) ObserveCategoryAt(name, value string, t time.Time) bool {
	v, i := m.category(name, value)
	if v == nil {
		return false
	}
	v.win.ObserveAt(i, t)
	return true
}

// category resolves a categorical variable and the stored index of value
// (len(cats) for "other"); nil for an undeclared or numeric variable.
func (m *Monitor) category(name, value string) (*variable, float64) {
	v := m.vars[name]
	if v == nil || v.kind != Categorical {
		return nil, 0
	}
	i, ok := v.catIndex[value]
	if !ok {
		i = len(v.cats)
	}
	return v, float64(i)
}

// Window returns the live window of the numeric variable name, so that a
// hot path can resolve the name once; nil for an undeclared or categorical
// variable (use ObserveCategory for those).
func (m *Monitor) Window(name string) *Window {
	if v := m.vars[name]; v != nil && v.kind == Numeric {
		return v.win
	}
	return nil
}

// SetReference replaces the reference of the variable name (nil removes
// it). The reference must have the variable's kind.
func (m *Monitor) SetReference(name string, ref *Reference) error {
	v := m.vars[name]
	if v == nil {
		return fmt.Errorf("drift scope %q: unknown variable %q", m.scope, name)
	}
	if ref == nil {
		v.ref.Store(nil)
		return nil
	}
	if ref.Name != name {
		return fmt.Errorf("drift scope %q: reference for %q given to %q", m.scope, ref.Name, name)
	}
	if rk := cmp.Or(ref.Kind, Numeric); rk != v.kind {
		return fmt.Errorf("drift scope %q: %s reference for %s variable %q", m.scope, rk, v.kind, name)
	}
	c, err := ref.compile(v.cats)
	if err != nil {
		return fmt.Errorf("drift scope %q: %w", m.scope, err)
	}
	v.ref.Store(c)
	return nil
}

// Record builds a reference from the variable's live window (a recorded
// period): equal-mass bins and the sample itself for a numeric variable,
// category proportions for a categorical one. It fails below MinSamples
// observations. Install it with SetReference; save it with
// MarshalReferences.
func (m *Monitor) Record(name string) (*Reference, error) {
	v := m.vars[name]
	if v == nil {
		return nil, fmt.Errorf("drift scope %q: unknown variable %q", m.scope, name)
	}
	pts, n := v.win.appendPoints(nil)
	if n < m.opts.MinSamples {
		return nil, fmt.Errorf("drift scope %q: record %q: %d observations, want at least %d", m.scope, name, n, m.opts.MinSamples)
	}
	if v.kind == Categorical {
		hist := categoryHist(pts, len(v.cats), nil)
		counts := make([]int64, len(v.cats))
		for i := range counts {
			counts[i] = int64(math.Round(hist[i] * float64(n)))
		}
		r, err := NewCategoricalReference(name, v.cats, counts)
		if err != nil {
			return nil, fmt.Errorf("drift scope %q: record: %w", m.scope, err)
		}
		r.Count = n
		return r, nil
	}
	r, err := referenceFromPoints(name, pts, m.opts.Bins)
	if err != nil {
		return nil, fmt.Errorf("drift scope %q: record: %w", m.scope, err)
	}
	return r, nil
}

// References returns the variables' current references in configuration
// order, skipping variables without one.
func (m *Monitor) References() []*Reference {
	var refs []*Reference
	for _, v := range m.order {
		if c := v.ref.Load(); c != nil {
			refs = append(refs, c.ref)
		}
	}
	return refs
}

// categoryHist returns the proportion of the points' weight in each of
// k categories plus "other" (index k), appended to dst[:0].
func categoryHist(pts []point, k int, dst []float64) []float64 {
	dst = append(dst[:0], make([]float64, k+1)...)
	var total float64
	for _, p := range pts {
		i := int(p.v)
		if i < 0 || i > k {
			i = k
		}
		dst[i] += p.w
		total += p.w
	}
	if total > 0 {
		for i := range dst {
			dst[i] /= total
		}
	}
	return dst
}

// Check compares every variable's live window with its reference, sets
// the gauges sluice_drift_psi and sluice_drift_ks_pvalue, counts each
// threshold crossing (a rising edge: drift that persists is counted once)
// in sluice_drift_events_total with a warning log, and returns the
// results ranked (see Rank for the order). Variables without a reference
// or with fewer than MinSamples observations are skipped and keep their
// gauges and alert state.
func (m *Monitor) Check() []Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	results := make([]Result, 0, len(m.order))
	var scratch []point
	for _, v := range m.order {
		var r Result
		r, scratch = m.check(v, scratch[:0])
		if r.Skip == "" {
			m.export(v, r)
		}
		results = append(results, r)
	}
	sortResults(results)
	m.last = slices.Clone(results)
	return results
}

// Last returns the results of the latest Check (nil before the first).
func (m *Monitor) Last() []Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.last)
}

func newResult(name string, kind Kind) Result {
	return Result{Name: name, Kind: kind, PSI: math.NaN(), KS: math.NaN(), PValue: math.NaN()}
}

func (m *Monitor) check(v *variable, scratch []point) (Result, []point) {
	r := newResult(v.name, v.kind)
	ref := v.ref.Load()
	pts, n := v.win.appendPoints(scratch)
	r.Samples = n
	switch {
	case ref == nil:
		r.Skip = SkipNoReference
		return r, pts
	case n < m.opts.MinSamples:
		r.Skip = SkipFewSamples
		return r, pts
	}
	r.BaseSamples = ref.ref.Count
	if v.kind == Categorical {
		r.PSI = PSI(ref.props, categoryHist(pts, len(v.cats), nil), m.opts.Epsilon)
	} else {
		live := newECDF(pts)
		if ref.edges != nil {
			r.PSI = PSI(ref.props, binProportions(live, ref.edges, nil), m.opts.Epsilon)
		}
		if ref.dist != nil {
			r.KS = ksStat(live, ref.dist)
			r.PValue = ks.PValue(r.KS, ks.EffectiveN(live.neff, ref.size))
		}
	}
	r.Drifting = m.psiHigh(r.PSI) || m.ksHigh(r.PValue)
	return r, pts
}

func (m *Monitor) psiHigh(psi float64) bool { return psi >= m.opts.PSIThreshold }
func (m *Monitor) ksHigh(p float64) bool    { return p < m.opts.KSAlpha }

// export sets the gauges and handles the edges of the alert state.
func (m *Monitor) export(v *variable, r Result) {
	if !math.IsNaN(r.PSI) {
		if m.m != nil {
			m.m.psi.WithLabelValues(m.scope, v.name).Set(r.PSI)
		}
		v.psiHigh = m.edge(v.name, eventPSI, v.psiHigh, m.psiHigh(r.PSI), "psi", r.PSI, m.opts.PSIThreshold)
	}
	if !math.IsNaN(r.PValue) {
		if m.m != nil {
			m.m.pvalue.WithLabelValues(m.scope, v.name).Set(r.PValue)
		}
		v.ksHigh = m.edge(v.name, eventKS, v.ksHigh, m.ksHigh(r.PValue), "p_value", r.PValue, m.opts.KSAlpha)
	}
}

// edge counts and logs a change of one alert state and returns the new one.
func (m *Monitor) edge(name, kind string, was, now bool, key string, value, threshold float64) bool {
	switch {
	case now && !was:
		if m.m != nil {
			m.m.events.WithLabelValues(m.scope, name, kind).Inc()
		}
		m.log.Warn("drift detected", "name", name, "kind", kind, key, value, "threshold", threshold)
	case was && !now:
		m.log.Info("drift cleared", "name", name, "kind", kind, key, value, "threshold", threshold)
	}
	return now
}

// Run calls Check every Interval until ctx is done, then returns nil.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			m.Check()
		}
	}
}

// Close deletes the monitor's series from the registry (the scope is
// going away, as when a service is removed).
func (m *Monitor) Close() {
	if m.m == nil {
		return
	}
	for _, v := range m.order {
		m.m.psi.DeleteLabelValues(m.scope, v.name)
		m.m.pvalue.DeleteLabelValues(m.scope, v.name)
		m.m.events.DeleteLabelValues(m.scope, v.name, eventPSI)
		m.m.events.DeleteLabelValues(m.scope, v.name, eventKS)
	}
}

// Rank compares the live windows of a failing group with those of the
// stable groups (pooled, each weighted by its traffic) and returns one
// Result per variable of failing that some stable monitor also declares
// with the same kind, most different first: by PSI descending, then by KS
// statistic descending, then by name; results without statistics (too few
// samples on either side) come last. Numeric variables are binned into
// failing's Bins equal-mass bins of the stable sample and also get the
// two-sample KS test; categorical ones are compared over failing's
// categories plus "other". Thresholds and MinSamples are failing's. Rank
// exports nothing and changes no state: it is the rollout diagnosis
// ("which inputs differ in the group that failed?").
func Rank(failing *Monitor, stable ...*Monitor) []Result {
	var results []Result
	for _, v := range failing.order {
		r, ok := failing.rank(v, stable)
		if ok {
			results = append(results, r)
		}
	}
	sortResults(results)
	return results
}

func (m *Monitor) rank(v *variable, stable []*Monitor) (Result, bool) {
	r := newResult(v.name, v.kind)
	var base []point
	found := false
	for _, s := range stable {
		sv := s.vars[v.name]
		if sv == nil || sv.kind != v.kind {
			continue
		}
		found = true
		start := len(base)
		var n int64
		base, n = sv.win.appendPoints(base)
		r.BaseSamples += n
		if v.kind == Categorical && !slices.Equal(sv.cats, v.cats) {
			// Re-index the stable group's categories onto failing's.
			for i := start; i < len(base); i++ {
				j, ok := len(v.cats), false
				if k := int(base[i].v); k < len(sv.cats) {
					j, ok = v.catIndex[sv.cats[k]]
				}
				if !ok {
					j = len(v.cats)
				}
				base[i].v = float64(j)
			}
		}
	}
	if !found {
		return r, false
	}
	pts, n := v.win.appendPoints(nil)
	r.Samples = n
	if n < m.opts.MinSamples || r.BaseSamples < m.opts.MinSamples {
		r.Skip = SkipFewSamples
		return r, true
	}
	if v.kind == Categorical {
		k := len(v.cats)
		r.PSI = PSI(categoryHist(base, k, nil), categoryHist(pts, k, nil), m.opts.Epsilon)
	} else {
		b, a := newECDF(base), newECDF(pts)
		edges := equalMassEdges(m.opts.Bins, b.quantile)
		r.PSI = PSI(binProportions(b, edges, nil), binProportions(a, edges, nil), m.opts.Epsilon)
		r.KS = ksStat(a, b)
		r.PValue = ks.PValue(r.KS, ks.EffectiveN(a.neff, b.neff))
	}
	r.Drifting = m.psiHigh(r.PSI) || m.ksHigh(r.PValue)
	return r, true
}

// sortResults orders results most different first: PSI descending, then
// KS statistic descending (NaN last in both), then name.
func sortResults(rs []Result) {
	desc := func(a, b float64) int {
		switch an, bn := math.IsNaN(a), math.IsNaN(b); {
		case an && bn:
			return 0
		case an:
			return 1
		case bn:
			return -1
		}
		return cmp.Compare(b, a)
	}
	slices.SortStableFunc(rs, func(a, b Result) int {
		return cmp.Or(desc(a.PSI, b.PSI), desc(a.KS, b.KS), cmp.Compare(a.Name, b.Name))
	})
}
