package diff

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/release/ks"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// Input says what Analyze compares.
type Input struct {
	// A is the recording analysed. Required.
	A record.Source
	// B, when set, is a second recording joined to A by request_id; when
	// nil, two arms of each record in A are compared ("arms" mode).
	// Analyze reads the sources to their end but does not close them.
	B record.Source
	// ArmA and ArmB name the arms compared: ArmA from A, ArmB from B (from
	// A in arms mode). Defaults: "primary" and "shadow" in arms mode,
	// "primary" and "primary" in join mode.
	ArmA, ArmB string
	// LabelA and LabelB name the sides in the report. Defaults: the arm
	// names in arms mode, "A" and "B" in join mode.
	LabelA, LabelB string
}

// Mode names.
const (
	ModeArms = "arms"
	ModeJoin = "join"
)

const missingValue = "(missing)"

// Analyze compares two sides — arms ArmA and ArmB of each record of
// in.A, or arm ArmA of in.A joined by request_id to arm ArmB of in.B —
// and evaluates the gates. It reads each source once; in join mode B is
// read completely first and kept in memory (outputs and latencies only),
// then A is streamed. It returns an error for invalid options or when a
// source fails or ctx ends; a failed gate is not an error (see
// Result.Passed).
func Analyze(ctx context.Context, in Input, opts Options) (*Result, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("invalid diff options: %w", err)
	}
	if in.A == nil {
		return nil, errors.New("no recording to analyse")
	}
	a := newAnalysis(in, opts)
	if a.mode == ModeArms && a.res.A.Arm == a.res.B.Arm {
		return nil, fmt.Errorf("both sides name arm %q", a.res.A.Arm)
	}
	if err := a.read(ctx, in); err != nil {
		return nil, err
	}
	a.finish()
	return a.res, nil
}

type analysis struct {
	opts Options
	mode string
	res  *Result

	rows []*row
	// minEffect is the ks gate's minimum effect per output, set from side
	// A's values overall (the first figures computed) and applied to
	// every slice.
	minEffect map[string]float64
	seenA     map[string]int // output name → pairs where A returned it
	seenB     map[string]int // output name → pairs where B returned it
	worst     map[string]*worstList
}

// row is one pair of the analysis.
type row struct {
	id        string
	time      time.Time
	a, b      *side
	aOK, bOK  bool
	outs      map[string]*outPair // outputs both sides returned, both OK
	sliceVals []keyVal
}

// outPair is one output of one row.
type outPair struct {
	a, b     []float64
	mismatch bool    // lengths differ or a value is not finite
	delta    float64 // signed Δ at the element with the largest |Δ|
	idx      int     // that element
}

func newAnalysis(in Input, opts Options) *analysis {
	mode := ModeArms
	if in.B != nil {
		mode = ModeJoin
	}
	armA, armB := cmp.Or(in.ArmA, "primary"), in.ArmB
	if armB == "" {
		armB = "shadow"
		if mode == ModeJoin {
			armB = "primary"
		}
	}
	labelA, labelB := in.LabelA, in.LabelB
	if mode == ModeArms {
		labelA, labelB = cmp.Or(labelA, armA), cmp.Or(labelB, armB)
	} else {
		labelA, labelB = cmp.Or(labelA, "A"), cmp.Or(labelB, "B")
	}
	outputs := slices.Clone(opts.Outputs)
	if outputs == nil {
		outputs = []string{}
	}
	sl := slices.Clone(opts.Slices)
	if sl == nil {
		sl = []SliceKey{}
	}
	return &analysis{
		opts: opts,
		mode: mode,
		res: &Result{
			Schema: ReportSchema,
			Mode:   mode,
			A:      Side{Label: labelA, Arm: armA, Models: map[string]int{}},
			B:      Side{Label: labelB, Arm: armB, Models: map[string]int{}},
			Options: OptionsReport{
				Outputs:              outputs,
				Threshold:            opts.Threshold,
				Relative:             opts.Relative,
				MaxSignificantShare:  opts.MaxSignificantShare,
				KSAlpha:              opts.KSAlpha,
				KSMinEffect:          opts.KSMinEffect,
				KSMinEffectSigma:     opts.KSMinEffectSigma,
				MinEffects:           opts.MinEffects,
				KSReportOnly:         opts.KSReportOnly,
				MinLatencySliceCount: opts.MinLatencySliceCount,
				MaxP95Regression:     opts.MaxP95Regression,
				MinP95IncreaseMS:     opts.MinP95IncreaseMS,
				MaxErrorRateIncrease: opts.MaxErrorRateIncrease,
				Slices:               sl,
				MinSliceCount:        opts.MinSliceCount,
				MissingSliceWarn:     opts.MissingSliceWarn,
				WorstN:               max(opts.WorstN, 0),
			},
			Failed:   []string{},
			Warnings: []string{},
			Outputs:  []OutputStats{},
			Slices:   []SliceReport{},
			Worst:    []WorstExamples{},
			Gates:    []Gate{},
		},
		seenA:     map[string]int{},
		seenB:     map[string]int{},
		worst:     map[string]*worstList{},
		minEffect: map[string]float64{},
	}
}

// checkEvery is how many records pass between context checks.
const checkEvery = 256

// read reads recording A (and, to join by request id, all of recording B
// first) and pairs each request's arms, counting what does not pair.
func (a *analysis) read(ctx context.Context, in Input) error {
	c := &a.res.Counts
	var index map[string]*side
	var matched map[string]bool
	if a.mode == ModeJoin {
		var err error
		if index, err = a.indexB(ctx, in); err != nil {
			return err
		}
		matched = map[string]bool{}
	}
	seenA := map[string]bool{}
	for {
		rec, err := in.A.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read recording a: %w", err)
		}
		c.RecordsA++
		if c.RecordsA%checkEvery == 0 && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if rec == nil {
			continue
		}
		sa := arm(rec, a.res.A.Arm)
		var sb *side
		if a.mode == ModeJoin {
			if seenA[rec.RequestID] {
				c.Duplicates++
				continue
			}
			seenA[rec.RequestID] = true
			sb = index[rec.RequestID]
			if sb != nil {
				matched[rec.RequestID] = true
			}
		} else {
			sb = arm(rec, a.res.B.Arm)
		}
		a.pairArms(rec, sa, sb)
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	a.countUnmatchedB(index, matched)
	return nil
}

// indexB reads recording B and indexes its B arms by request id; a
// repeated request id is counted as a duplicate and the first one kept.
func (a *analysis) indexB(ctx context.Context, in Input) (map[string]*side, error) {
	c := &a.res.Counts
	index := map[string]*side{}
	for {
		rec, err := in.B.Next(ctx)
		if errors.Is(err, io.EOF) {
			return index, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read recording b: %w", err)
		}
		c.RecordsB++
		if c.RecordsB%checkEvery == 0 && ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if rec == nil {
			continue
		}
		if _, dup := index[rec.RequestID]; dup {
			c.Duplicates++
			continue
		}
		index[rec.RequestID] = arm(rec, a.res.B.Arm)
	}
}

// pairArms compares a request's two arms, or counts the request as
// unmatched (one arm) or incomplete (neither).
func (a *analysis) pairArms(rec *record.Record, sa, sb *side) {
	c := &a.res.Counts
	switch {
	case sa != nil && sb != nil:
		a.addPair(rec, sa, sb)
	case sa != nil:
		c.UnmatchedA++
	case sb != nil:
		c.UnmatchedB++
	default:
		c.Incomplete++
	}
}

// countUnmatchedB counts the indexed B records no A record matched.
func (a *analysis) countUnmatchedB(index map[string]*side, matched map[string]bool) {
	c := &a.res.Counts
	for id, sb := range index {
		if matched[id] {
			continue
		}
		if sb == nil {
			c.Incomplete++
		} else {
			c.UnmatchedB++
		}
	}
}

// succeeded reports a 2xx status: only then are a side's outputs valid.
func succeeded(s *side) bool { return s.status >= 200 && s.status < 300 }

func (a *analysis) addPair(rec *record.Record, sa, sb *side) {
	r := &row{id: rec.RequestID, time: rec.Time, a: sa, b: sb, aOK: succeeded(sa), bOK: succeeded(sb)}
	a.res.A.Models[sa.model+":"+sa.version]++
	a.res.B.Models[sb.model+":"+sb.version]++
	if r.aOK && r.bOK {
		r.outs = map[string]*outPair{}
		for name, av := range sa.outputs {
			a.seenA[name]++
			bv, ok := sb.outputs[name]
			if !ok {
				continue
			}
			p := &outPair{a: av, b: bv}
			a.measure(p)
			r.outs[name] = p
			if !p.mismatch {
				a.offerWorst(name, rec, p)
			}
		}
		for name := range sb.outputs {
			a.seenB[name]++
		}
	}
	for _, k := range a.opts.Slices {
		r.sliceVals = append(r.sliceVals, lookup(rec, k))
	}
	a.rows = append(a.rows, r)
}

// delta is the signed Δ of one element pair under the options.
func (a *analysis) delta(x, y float64) float64 {
	d := y - x
	if a.opts.Relative {
		d /= max(math.Abs(x), a.opts.RelativeFloor)
	}
	return d
}

func (a *analysis) measure(p *outPair) {
	if len(p.a) != len(p.b) || len(p.a) == 0 {
		p.mismatch = true
		return
	}
	best := -1.0
	for i := range p.a {
		x, y := p.a[i], p.b[i]
		switch fx, fy := isFinite(x), isFinite(y); {
		case !fx && !fy && (x == y || math.IsNaN(x) && math.IsNaN(y)):
			continue // the same non-number on both sides: equal, not comparable
		case !fx || !fy:
			p.mismatch = true
			return
		}
		if d := a.delta(x, y); math.Abs(d) > best {
			best, p.delta, p.idx = math.Abs(d), d, i
		}
	}
	if best < 0 { // every element was a matching non-number
		p.delta, p.idx = 0, 0
	}
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func (a *analysis) significant(d float64) bool { return math.Abs(d) > a.opts.Threshold }

// worstList keeps the WorstN largest |Δ| of one output. It collects up to
// 2·WorstN candidates, then sorts and truncates, so each offer is O(1)
// amortised and only candidates that can still make the list have their
// context copied.
type worstList struct {
	n     int
	items []Example
	floor float64 // |Δ| of the smallest kept item once the list was full
	full  bool
}

func (a *analysis) offerWorst(name string, rec *record.Record, p *outPair) {
	if a.opts.WorstN <= 0 {
		return
	}
	w := a.worst[name]
	if w == nil {
		w = &worstList{n: a.opts.WorstN}
		a.worst[name] = w
	}
	abs := math.Abs(p.delta)
	if w.full && abs < w.floor {
		return
	}
	w.items = append(w.items, Example{
		RequestID: rec.RequestID, Time: rec.Time, Index: p.idx,
		A: p.a[p.idx], B: p.b[p.idx], Delta: p.delta, Significant: a.significant(p.delta),
		Headers: maps.Clone(rec.Headers), Features: maps.Clone(rec.Features), Request: maps.Clone(rec.Request),
	})
	if len(w.items) >= 2*w.n {
		w.trim()
	}
}

func (w *worstList) trim() {
	slices.SortStableFunc(w.items, func(x, y Example) int {
		return cmp.Or(cmp.Compare(math.Abs(y.Delta), math.Abs(x.Delta)), strings.Compare(x.RequestID, y.RequestID))
	})
	if len(w.items) > w.n {
		clear(w.items[w.n:])
		w.items = w.items[:w.n]
	}
	if len(w.items) == w.n {
		w.full, w.floor = true, math.Abs(w.items[w.n-1].Delta)
	}
}

// keyVal is one record's value for a slice key.
type keyVal struct {
	kind keyKind
	s    string
	f    float64
}

type keyKind uint8

const (
	kvMissing keyKind = iota
	kvString
	kvNumber
	kvUnsliceable // a list or object: no single value to slice by
)

func lookup(rec *record.Record, k SliceKey) keyVal {
	if k.Source == SourceHeader || k.Source == SourceAuto {
		if v, ok := rec.Headers[strings.ToLower(k.Name)]; ok {
			return keyVal{kind: kvString, s: v}
		}
	}
	if k.Source == SourceFeature || k.Source == SourceAuto {
		if v, ok := rec.Features[k.Name]; ok && v != nil {
			return valueOf(v)
		}
	}
	if k.Source == SourceRequest || k.Source == SourceAuto {
		if v, ok := rec.Request[k.Name]; ok && v != nil {
			return valueOf(v)
		}
	}
	return keyVal{kind: kvMissing}
}

func valueOf(v any) keyVal {
	switch x := v.(type) {
	case string:
		return keyVal{kind: kvString, s: x}
	case bool:
		return keyVal{kind: kvString, s: strconv.FormatBool(x)}
	case float64:
		return number(x)
	case float32:
		return number(float64(x))
	case int:
		return number(float64(x))
	case int64:
		return number(float64(x))
	case int32:
		return number(float64(x))
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return number(f)
		}
		return keyVal{kind: kvString, s: x.String()}
	default:
		return keyVal{kind: kvUnsliceable}
	}
}

func number(f float64) keyVal {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return keyVal{kind: kvUnsliceable}
	}
	return keyVal{kind: kvNumber, f: f}
}

func (a *analysis) finish() {
	res := a.res
	res.GeneratedAt = time.Now().UTC()
	res.Counts.Pairs = len(a.rows)
	for _, r := range a.rows {
		if r.aOK && r.bOK {
			res.Counts.BothOK++
		}
		if !r.time.IsZero() {
			if res.From.IsZero() || r.time.Before(res.From) {
				res.From = r.time
			}
			if r.time.After(res.To) {
				res.To = r.time
			}
		}
	}
	outputs := a.chooseOutputs()
	res.Options.Outputs = append([]string{}, outputs...)

	fig := a.figures(a.rows, outputs, true)
	res.Outputs, res.Latency, res.Errors = fig.outputs, fig.latency, fig.errors
	a.dataGate(outputs)
	a.gates(fig, "", true)

	for i, k := range a.opts.Slices {
		res.Slices = append(res.Slices, a.slice(i, k, outputs))
	}
	for _, name := range outputs {
		w := a.worst[name]
		ex := []Example{}
		if w != nil {
			w.trim()
			ex = w.items
		}
		res.Worst = append(res.Worst, WorstExamples{Output: name, Examples: ex})
	}
	a.countWarnings()
	res.Passed = len(res.Failed) == 0
}

// chooseOutputs picks the outputs to compare and warns about the others.
func (a *analysis) chooseOutputs() []string {
	both := func(name string) bool { return a.seenA[name] > 0 && a.seenB[name] > 0 }
	if len(a.opts.Outputs) > 0 {
		for _, name := range a.opts.Outputs {
			if !both(name) {
				a.warnf("output %s was not returned by both sides of any compared request", name)
			}
		}
		return slices.Clone(a.opts.Outputs)
	}
	var out []string
	names := slices.Sorted(maps.Keys(a.seenA))
	for _, name := range names {
		if both(name) {
			out = append(out, name)
		} else {
			a.warnf("output %s was returned only by %s", name, a.res.A.Label)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.seenB)) {
		if a.seenA[name] == 0 {
			a.warnf("output %s was returned only by %s", name, a.res.B.Label)
		}
	}
	return out
}

func (a *analysis) countWarnings() {
	c, res := a.res.Counts, a.res
	if a.mode == ModeJoin {
		if c.UnmatchedA > 0 {
			a.warnf("%d of %d records of %s have no request_id match in %s", c.UnmatchedA, c.RecordsA, res.A.Label, res.B.Label)
		}
		if c.UnmatchedB > 0 {
			a.warnf("%d of %d records of %s have no request_id match in %s", c.UnmatchedB, c.RecordsB, res.B.Label, res.A.Label)
		}
	} else {
		if c.UnmatchedA > 0 {
			a.warnf("%d records have no %s arm", c.UnmatchedA, res.B.Arm)
		}
		if c.UnmatchedB > 0 {
			a.warnf("%d records have no %s arm", c.UnmatchedB, res.A.Arm)
		}
	}
	if c.Duplicates > 0 {
		a.warnf("%d records repeat a request_id and were skipped", c.Duplicates)
	}
	if c.Incomplete > 0 {
		a.warnf("%d records have neither arm", c.Incomplete)
	}
}

func (a *analysis) warnf(format string, args ...any) {
	a.res.Warnings = append(a.res.Warnings, fmt.Sprintf(format, args...))
}

// figures are the statistics of a set of rows.
type figures struct {
	outputs []OutputStats
	latency Latency
	errors  ErrorRates
	bothOK  int
}

func (a *analysis) figures(rows []*row, outputs []string, full bool) figures {
	var f figures
	var latA, latB []float64
	f.errors.Requests = len(rows)
	for _, r := range rows {
		if r.aOK {
			latA = append(latA, r.a.latencyMS)
		} else {
			f.errors.ErrorsA++
		}
		if r.bOK {
			latB = append(latB, r.b.latencyMS)
		} else {
			f.errors.ErrorsB++
			if full {
				if f.errors.ReasonsB == nil {
					f.errors.ReasonsB = map[string]int{}
				}
				f.errors.ReasonsB[reason(r.b)]++
			}
		}
		if r.aOK && r.bOK {
			f.bothOK++
		}
	}
	if n := len(rows); n > 0 {
		f.errors.RateA = float64(f.errors.ErrorsA) / float64(n)
		f.errors.RateB = float64(f.errors.ErrorsB) / float64(n)
	}
	f.latency = latency(latA, latB)
	for _, name := range outputs {
		f.outputs = append(f.outputs, a.outputStats(rows, name, full))
	}
	if f.outputs == nil {
		f.outputs = []OutputStats{}
	}
	return f
}

func reason(s *side) string {
	if s.reason == "" {
		return "status " + strconv.Itoa(s.status)
	}
	return "status " + strconv.Itoa(s.status) + ": " + s.reason
}

func latency(a, b []float64) Latency {
	slices.Sort(a)
	slices.Sort(b)
	pc := func(s []float64) Percentiles {
		return Percentiles{N: len(s), P50: quantile(s, 0.50), P95: quantile(s, 0.95), P99: quantile(s, 0.99)}
	}
	l := Latency{A: pc(a), B: pc(b)}
	if l.A.P95 > 0 && l.B.N > 0 {
		l.P95Change = finite((l.B.P95 - l.A.P95) / l.A.P95)
	}
	return l
}

func (a *analysis) outputStats(rows []*row, name string, full bool) OutputStats {
	st := OutputStats{Name: name}
	var av, bv, deltas []float64
	var sum, sumAbs float64
	for _, r := range rows {
		if !r.aOK || !r.bOK {
			continue
		}
		p := r.outs[name]
		if p == nil {
			_, inA := r.a.outputs[name]
			_, inB := r.b.outputs[name]
			if inA || inB { // one side only; neither means both agree there is none
				st.Mismatched++
			}
			continue
		}
		if p.mismatch {
			st.Mismatched++
			continue
		}
		st.Compared++
		if a.significant(p.delta) {
			st.Significant++
		}
		for i := range p.a {
			if !isFinite(p.a[i]) { // measure let only matching non-numbers through
				continue
			}
			av = append(av, p.a[i])
			bv = append(bv, p.b[i])
			d := a.delta(p.a[i], p.b[i])
			sum += d
			sumAbs += math.Abs(d)
			st.MaxAbsDelta = max(st.MaxAbsDelta, math.Abs(d))
			if full {
				deltas = append(deltas, d)
			}
		}
	}
	st.Elements = len(av)
	if st.Elements > 0 {
		st.MeanDelta = finite(sum / float64(st.Elements))
		st.MeanAbsDelta = finite(sumAbs / float64(st.Elements))
	}
	st.MaxAbsDelta = finite(st.MaxAbsDelta)
	if st.Compared > 0 {
		st.SignificantShare = float64(st.Significant) / float64(st.Compared)
	}
	slices.Sort(av)
	slices.Sort(bv)
	st.KS = ks.TwoSample(av, bv)
	st.KSEffect = finite(percentileDistance(av, bv, a.opts.Relative, a.opts.RelativeFloor))
	st.A, st.B = summarize(av), summarize(bv)
	if full {
		a.minEffect[name] = a.opts.minEffect(name, st.A)
	}
	st.KSMinEffect = a.minEffect[name]
	st.KSVerdict = a.ksVerdict(st)
	if full {
		st.Histogram = newHistogram(av, bv, a.opts.Bins)
		st.CDF = newCDF(av, bv)
		st.DeltaHistogram = newHistogram(deltas, nil, a.opts.Bins)
	}
	return st
}

// dataGate fails when nothing could be compared: an analysis of no data
// must not pass.
func (a *analysis) dataGate(outputs []string) {
	compared := 0
	for _, o := range a.res.Outputs {
		compared += o.Compared
	}
	g := Gate{Name: GateData, Value: float64(compared), Limit: 1, Passed: compared > 0}
	switch {
	case len(outputs) == 0:
		g.Message = "no output was returned by both sides"
	case compared == 0:
		g.Message = "no request had an output both sides returned successfully"
	default:
		g.Message = fmt.Sprintf("%d output values compared", compared)
	}
	a.addGate(g)
}

// gates evaluates the gates on fig; slice is "" overall or "key=value".
func (a *analysis) gates(fig figures, slice string, withLatency bool) bool {
	o := a.opts
	passed := true
	add := func(g Gate) {
		g.Slice = slice
		passed = a.addGate(g) && passed
	}
	for _, st := range fig.outputs {
		if n := st.Compared + st.Mismatched; o.MaxSignificantShare >= 0 && n > 0 {
			// A request whose output changed shape or went missing has
			// deviated too: the gate counts it with the significant ones.
			share := float64(st.Significant+st.Mismatched) / float64(n)
			msg := fmt.Sprintf("%d of %d requests (%.2f%%) deviate by |Δ| > %g", st.Significant, st.Compared, 100*st.SignificantShare, o.Threshold)
			if st.Mismatched > 0 {
				msg += fmt.Sprintf("; %d more have a missing or differently shaped output", st.Mismatched)
			}
			add(Gate{
				Name: GateSignificantShare, Output: st.Name, Value: share, Limit: o.MaxSignificantShare,
				Passed: share <= o.MaxSignificantShare, Message: msg,
			})
		}
		if st.KSVerdict != KSNotTested {
			add(a.ksGate(st, slice))
		}
	}
	if withLatency && o.MaxP95Regression >= 0 && fig.latency.A.N > 0 && fig.latency.B.N > 0 {
		l := fig.latency
		inc := l.B.P95 - l.A.P95
		add(Gate{
			Name: GateLatencyP95, Value: l.P95Change, Limit: o.MaxP95Regression,
			Passed:  !(l.P95Change > o.MaxP95Regression && inc > o.MinP95IncreaseMS),
			Message: fmt.Sprintf("p95 %.3g ms → %.3g ms (%+.1f%%)", l.A.P95, l.B.P95, 100*l.P95Change),
		})
	}
	if o.MaxErrorRateIncrease >= 0 && fig.errors.Requests > 0 {
		e := fig.errors
		add(Gate{
			Name: GateErrorRate, Value: e.RateB - e.RateA, Limit: o.MaxErrorRateIncrease,
			Passed:  e.RateB-e.RateA <= o.MaxErrorRateIncrease,
			Message: fmt.Sprintf("error rate %.2f%% → %.2f%% over %d requests", 100*e.RateA, 100*e.RateB, e.Requests),
		})
	}
	return passed
}

// ksVerdict reads st's KS test against the alpha and st's minimum effect.
func (a *analysis) ksVerdict(st OutputStats) string {
	switch {
	case a.opts.KSAlpha < 0 || st.KS.NA == 0 || st.KS.NB == 0:
		return KSNotTested
	case st.KS.PValue >= a.opts.KSAlpha:
		return KSNotSignificant
	case st.KSMinEffect < 0 || st.KSEffect > st.KSMinEffect:
		return KSSignificant
	}
	return KSBelowMinEffect
}

// ksGate is the ks gate of one output. A significant result is never
// silent: below the minimum effect it passes with a warning that says so;
// above it, it fails (or, report-only, passes with a warning).
func (a *analysis) ksGate(st OutputStats, slice string) Gate {
	minText := "any difference"
	if st.KSMinEffect >= 0 {
		minText = fmt.Sprintf("min effect %.4g", st.KSMinEffect)
	}
	g := Gate{
		Name: GateKS, Output: st.Name, Value: st.KS.PValue, Limit: a.opts.KSAlpha, Passed: true,
		Message: fmt.Sprintf("KS D = %.4f, p = %.3g (%s, n = %d/%d), effect %.4g (%s)",
			st.KS.Statistic, st.KS.PValue, st.KS.Method, st.KS.NA, st.KS.NB, st.KSEffect, minText),
	}
	where := st.Name
	if slice != "" {
		where += " @" + slice
	}
	switch st.KSVerdict {
	case KSSignificant:
		g.Message = "significant shift: " + g.Message
		if a.opts.KSReportOnly {
			g.Message += "; the ks gate is report-only"
			a.warnf("%s: significant shift (KS D = %.4f, p = %.3g, effect %.4g above the %s); the ks gate is report-only", where, st.KS.Statistic, st.KS.PValue, st.KSEffect, minText)
		} else {
			g.Passed = false
		}
	case KSBelowMinEffect:
		g.Message = "significant but below the minimum effect: " + g.Message
		a.warnf("%s: significant but below the minimum effect (KS D = %.4f, p = %.3g, effect %.4g ≤ %s)", where, st.KS.Statistic, st.KS.PValue, st.KSEffect, minText)
	}
	return g
}

func (a *analysis) addGate(g Gate) bool {
	g.ID = g.Name
	if g.Output != "" {
		g.ID += "[" + g.Output + "]"
	}
	if g.Slice != "" {
		g.ID += "@" + g.Slice
	}
	g.Value, g.Limit = finite(g.Value), finite(g.Limit)
	a.res.Gates = append(a.res.Gates, g)
	if !g.Passed {
		a.res.Failed = append(a.res.Failed, g.ID)
	}
	return g.Passed
}

// maxDistinctValues is the most distinct numbers a key without edges may
// have and still get one slice per number; more are bucketed by quartile.
const maxDistinctValues = 12

func (a *analysis) slice(i int, k SliceKey, outputs []string) SliceReport {
	rep := SliceReport{Key: k, Groups: []SliceGroup{}}
	edges := k.Edges
	var nums []float64
	unsliceable := 0
	for _, r := range a.rows {
		switch v := r.sliceVals[i]; v.kind {
		case kvMissing:
			rep.Missing++
		case kvNumber:
			nums = append(nums, v.f)
		case kvUnsliceable:
			unsliceable++
		case kvString:
		}
	}
	if len(a.rows) > 0 {
		rep.MissingShare = float64(rep.Missing) / float64(len(a.rows))
	}
	if rep.MissingShare > a.opts.MissingSliceWarn {
		a.warnf("slice key %s is missing from %d of %d records (%.0f%%): its slices may mis-attribute deviations",
			k, rep.Missing, len(a.rows), 100*rep.MissingShare)
	}
	if unsliceable > 0 {
		a.warnf("slice key %s holds a list or object in %d records; they form the (unsliceable) slice", k, unsliceable)
	}
	perValue := false
	if len(edges) == 0 && len(nums) > 0 {
		distinct := slices.Compact(slices.Sorted(slices.Values(nums)))
		if len(distinct) <= maxDistinctValues {
			perValue = true
		} else {
			edges = quartileEdges(nums)
		}
	}
	// Group rows, remembering a sort key per group.
	type group struct {
		order int // 0 numeric, 1 string, 2 unsliceable, 3 missing
		num   float64
		label string
		rows  []*row
	}
	groups := map[string]*group{}
	for _, r := range a.rows {
		v := r.sliceVals[i]
		var g group
		switch v.kind {
		case kvNumber:
			if perValue {
				g = group{order: 0, num: v.f, label: strconv.FormatFloat(v.f, 'g', -1, 64)}
			} else {
				b := bucket(edges, v.f)
				g = group{order: 0, num: float64(b), label: bucketLabel(edges, b)}
			}
		case kvString:
			g = group{order: 1, label: v.s}
		case kvUnsliceable:
			g = group{order: 2, label: "(unsliceable)"}
		case kvMissing:
			g = group{order: 3, label: missingValue}
		}
		key := strconv.Itoa(g.order) + "\x00" + g.label
		if groups[key] == nil {
			groups[key] = &g
		}
		groups[key].rows = append(groups[key].rows, r)
	}
	ordered := slices.SortedFunc(maps.Values(groups), func(x, y *group) int {
		return cmp.Or(cmp.Compare(x.order, y.order), cmp.Compare(x.num, y.num), strings.Compare(x.label, y.label))
	})
	name := k.Name
	for _, g := range ordered {
		fig := a.figures(g.rows, outputs, false)
		sg := SliceGroup{
			Value: g.label, Pairs: len(g.rows), Passed: true,
			Outputs: fig.outputs, Latency: fig.latency, Errors: fig.errors,
		}
		// Latency is gated per slice only with MinLatencySliceCount
		// requests on each side: a p95 from a few dozen is noise.
		if fig.bothOK >= a.opts.MinSliceCount {
			sg.Gated = true
			latency := fig.latency.A.N >= a.opts.MinLatencySliceCount && fig.latency.B.N >= a.opts.MinLatencySliceCount
			sg.Passed = a.gates(fig, name+"="+g.label, latency)
		}
		rep.Groups = append(rep.Groups, sg)
	}
	return rep
}

// quartileEdges returns the quartiles of nums rounded to 4 significant
// digits, without duplicates, as bucket edges.
func quartileEdges(nums []float64) []float64 {
	s := slices.Sorted(slices.Values(nums))
	var edges []float64
	for _, q := range []float64{0.25, 0.5, 0.75} {
		e := round4(quantile(s, q))
		if len(edges) == 0 || e > edges[len(edges)-1] {
			edges = append(edges, e)
		}
	}
	return edges
}

func round4(v float64) float64 {
	f, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	if err != nil {
		return v
	}
	return f
}

// bucket is the number of edges at or below v: 0 is (-inf, e0).
func bucket(edges []float64, v float64) int {
	n, _ := slices.BinarySearch(edges, v)
	if n < len(edges) && edges[n] == v {
		n++
	}
	return n
}

func bucketLabel(edges []float64, b int) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	switch {
	case len(edges) == 0:
		return "(all)"
	case b == 0:
		return "(-inf," + f(edges[0]) + ")"
	case b == len(edges):
		return "[" + f(edges[b-1]) + ",+inf)"
	default:
		return "[" + f(edges[b-1]) + "," + f(edges[b]) + ")"
	}
}
