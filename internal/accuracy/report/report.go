// Package report builds the self-contained HTML report of online accuracy
// (sluice accuracy report) from the prediction log's joined records: the
// error over time per version, a per-slice table with 95 % confidence
// intervals, residual and calibration plots, and the worst slices. The
// page embeds its plots as SVG data URLs: one file, no network.
package report

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/sluice-ml/sluice/internal/accuracy/accuracyspec"
	"github.com/sluice-ml/sluice/internal/release/record"
)

// Output is one output the report judges: its name, the outcome value it
// is compared with, and its kind (accuracyspec's).
type Output struct {
	Name, Observed, Kind string
}

// Options say what the report covers.
type Options struct {
	// Service is the service reported on; empty: the first one found.
	Service string
	// Outputs are the outputs judged; empty: every output whose name is
	// also an observed value's, as regression.
	Outputs []Output
	// Since drops pairs whose prediction is older.
	Since time.Time
	// Now is the report's time [time.Now].
	Now time.Time
	// MinSlice is the pairs a slice needs to be ranked among the worst [30].
	MinSlice int
}

// pair is one joined prediction.
type pair struct {
	t         time.Time
	version   string
	slices    []string
	pred, obs float64
}

// Report is the computed content of the page.
type Report struct {
	Service   string
	Generated time.Time
	Since     time.Time
	Pairs     int
	Outputs   []OutputReport
}

// OutputReport is one output's section.
type OutputReport struct {
	Output
	Rows   []Row // by version, then slice
	Worst  []Row
	Over   *figure
	Resid  *figure
	Calib  *figure
	Binary bool
}

// Row is one version and slice: the error with 95 % confidence intervals.
type Row struct {
	Version, Slice string
	N              int
	MAE, MAECI     float64
	Bias, BiasCI   float64
	RMSE           float64
	Accuracy       float64 // binary
	LogLoss        float64 // binary
	Ratio          float64 // MAE (or log loss) over the version's "all"
}

type figure struct {
	Title string
	URL   template.URL
}

// Build reads the joined records of src and computes the report.
func Build(ctx context.Context, src record.Source, o Options) (*Report, error) {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.MinSlice <= 0 {
		o.MinSlice = 30
	}
	rep := &Report{Service: o.Service, Generated: o.Now.UTC(), Since: o.Since.UTC()}
	byOutput := map[string][]pair{}
	outputs := o.Outputs
	for {
		r, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if r.Outcome == nil || r.Time.Before(o.Since) {
			continue
		}
		if rep.Service == "" {
			rep.Service = r.Service
		}
		if r.Service != rep.Service {
			continue
		}
		arm := r.Arms[record.ArmPrimary]
		if outputs == nil {
			for name := range arm.Outputs {
				if _, ok := r.Outcome.Values[name]; ok {
					outputs = append(outputs, Output{Name: name, Observed: name, Kind: accuracyspec.KindRegression})
				}
			}
		}
		sl := []string{"all"}
		if r.Route != "" {
			sl = append(sl, "route="+r.Route)
		}
		if r.Group != "" {
			sl = append(sl, "group="+r.Group)
		}
		for _, h := range sortedKeys(r.Headers) {
			if h != "x-request-id" {
				sl = append(sl, h+"="+r.Headers[h])
			}
		}
		rep.Pairs++
		for _, out := range outputs {
			pv, ok1 := arm.Outputs[out.Name]
			ov, ok2 := r.Outcome.Values[out.Observed]
			if !ok1 || !ok2 || len(pv) == 0 {
				continue
			}
			byOutput[out.Name] = append(byOutput[out.Name], pair{t: r.Time, version: arm.Version, slices: sl, pred: pv[0], obs: ov})
		}
	}
	for _, out := range outputs {
		ps := byOutput[out.Name]
		if len(ps) == 0 {
			continue
		}
		or, err := outputReport(out, ps, o)
		if err != nil {
			return nil, err
		}
		rep.Outputs = append(rep.Outputs, *or)
	}
	return rep, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// acc sums one version and slice.
type acc struct {
	n                      int
	sumAbs, sumAbs2        float64
	sumErr, sumErr2, sumLL float64
	correct                int
}

func (a *acc) add(pred, obs float64, binary bool) {
	e := pred - obs
	a.n++
	a.sumAbs += math.Abs(e)
	a.sumAbs2 += e * e
	a.sumErr += e
	a.sumErr2 += e * e
	if binary {
		p := min(max(pred, 1e-15), 1-1e-15)
		if obs >= 0.5 {
			a.sumLL -= math.Log(p)
		} else {
			a.sumLL -= math.Log(1 - p)
		}
		if (pred >= 0.5) == (obs >= 0.5) {
			a.correct++
		}
	}
}

// ci95 is the half width of a 95 % normal confidence interval of a mean
// from its sum and sum of squares.
func ci95(n int, sum, sum2 float64) float64 {
	if n < 2 {
		return math.NaN()
	}
	m := sum / float64(n)
	v := (sum2 - float64(n)*m*m) / float64(n-1)
	return 1.96 * math.Sqrt(max(v, 0)/float64(n))
}

func (a *acc) row(version, slice string) Row {
	n := float64(a.n)
	r := Row{
		Version: version, Slice: slice, N: a.n, MAE: a.sumAbs / n, Bias: a.sumErr / n, RMSE: math.Sqrt(a.sumErr2 / n),
		BiasCI: ci95(a.n, a.sumErr, a.sumErr2), Accuracy: float64(a.correct) / n, LogLoss: a.sumLL / n,
	}
	// |e|'s second moment is e's.
	r.MAECI = ci95(a.n, a.sumAbs, a.sumAbs2)
	return r
}

func outputReport(out Output, ps []pair, o Options) (*OutputReport, error) {
	binary := out.Kind == accuracyspec.KindBinary
	or := &OutputReport{Output: out, Binary: binary}
	accs := map[[2]string]*acc{}
	for _, p := range ps {
		for _, sl := range p.slices {
			k := [2]string{p.version, sl}
			if accs[k] == nil {
				accs[k] = &acc{}
			}
			accs[k].add(p.pred, p.obs, binary)
		}
	}
	keys := make([][2]string, 0, len(accs))
	for k := range accs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		switch {
		case a[1] == "all":
			return -1
		case b[1] == "all":
			return 1
		}
		return strings.Compare(a[1], b[1])
	})
	for _, k := range keys {
		r := accs[k].row(k[0], k[1])
		all := accs[[2]string{k[0], "all"}].row(k[0], "all")
		if binary && all.LogLoss > 0 {
			r.Ratio = r.LogLoss / all.LogLoss
		} else if all.MAE > 0 {
			r.Ratio = r.MAE / all.MAE
		}
		or.Rows = append(or.Rows, r)
		if k[1] != "all" && r.N >= o.MinSlice {
			or.Worst = append(or.Worst, r)
		}
	}
	slices.SortStableFunc(or.Worst, func(a, b Row) int {
		switch {
		case a.Ratio > b.Ratio:
			return -1
		case a.Ratio < b.Ratio:
			return 1
		}
		return 0
	})
	or.Worst = or.Worst[:min(len(or.Worst), 5)]
	var err error
	if or.Over, err = render("Error over time per version", func() (*plot.Plot, error) { return overTime(out, ps, binary) }); err != nil {
		return nil, err
	}
	if binary {
		or.Calib, err = render("Calibration per version", func() (*plot.Plot, error) { return calibration(ps) })
	} else {
		or.Resid, err = render("Residuals (predicted − observed) per version", func() (*plot.Plot, error) { return residuals(ps) })
	}
	if err != nil {
		return nil, err
	}
	return or, nil
}

var palette = []color.Color{
	color.NRGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.NRGBA{R: 0xd6, G: 0x5f, B: 0x0e, A: 0xff},
	color.NRGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.NRGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

func versions(ps []pair) []string {
	var out []string
	for _, p := range ps {
		if !slices.Contains(out, p.version) {
			out = append(out, p.version)
		}
	}
	slices.Sort(out)
	return out
}

// overTime plots each version's MAE (log loss for binary) per time bucket:
// 24 buckets over the pairs' span.
func overTime(out Output, ps []pair, binary bool) (*plot.Plot, error) {
	first, last := ps[0].t, ps[0].t
	for _, p := range ps {
		if p.t.Before(first) {
			first = p.t
		}
		if p.t.After(last) {
			last = p.t
		}
	}
	const buckets = 24
	width := max(last.Sub(first)/buckets, time.Second)
	p := plot.New()
	p.X.Label.Text = "hours since " + first.UTC().Format(time.RFC3339)
	p.Y.Label.Text = "MAE of " + out.Name
	if binary {
		p.Y.Label.Text = "log loss of " + out.Name
	}
	for i, v := range versions(ps) {
		sums := make([]acc, buckets+1)
		for _, q := range ps {
			if q.version == v {
				sums[int(q.t.Sub(first)/width)].add(q.pred, q.obs, binary)
			}
		}
		var xy plotter.XYs
		for b := range sums {
			if sums[b].n == 0 {
				continue
			}
			y := sums[b].sumAbs / float64(sums[b].n)
			if binary {
				y = sums[b].sumLL / float64(sums[b].n)
			}
			xy = append(xy, plotter.XY{X: (time.Duration(b) * width).Hours(), Y: y})
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = palette[i%len(palette)], palette[i%len(palette)]
		p.Add(l, pts)
		p.Legend.Add("version "+v, l, pts)
	}
	p.Legend.Top = true
	return p, nil
}

// residuals overlays each version's histogram of predicted − observed.
func residuals(ps []pair) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "predicted − observed"
	p.Y.Label.Text = "pairs"
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, q := range ps {
		lo, hi = min(lo, q.pred-q.obs), max(hi, q.pred-q.obs)
	}
	if hi <= lo {
		hi = lo + 1
	}
	const bins = 30
	w := (hi - lo) / bins
	for i, v := range versions(ps) {
		counts := make([]float64, bins)
		for _, q := range ps {
			if q.version == v {
				counts[min(int((q.pred-q.obs-lo)/w), bins-1)]++
			}
		}
		hb := make([]plotter.HistogramBin, bins)
		for b := range hb {
			hb[b] = plotter.HistogramBin{Min: lo + float64(b)*w, Max: lo + float64(b+1)*w, Weight: counts[b]}
		}
		h := &plotter.Histogram{Bins: hb, Width: w, LineStyle: plotter.DefaultLineStyle}
		c := palette[i%len(palette)].(color.NRGBA)
		h.FillColor = color.NRGBA{R: c.R, G: c.G, B: c.B, A: 0x60}
		h.Color = c
		p.Add(h)
		p.Legend.Add("version "+v, h)
	}
	p.Legend.Top = true
	return p, nil
}

// calibration plots observed rate against mean predicted probability in
// ten bins per version.
func calibration(ps []pair) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "mean predicted probability"
	p.Y.Label.Text = "observed rate"
	diag, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		return nil, err
	}
	diag.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(diag)
	for i, v := range versions(ps) {
		var n, sp, so [10]float64
		for _, q := range ps {
			if q.version != v {
				continue
			}
			b := min(int(min(max(q.pred, 0), 1)*10), 9)
			n[b]++
			sp[b] += q.pred
			if q.obs >= 0.5 {
				so[b]++
			}
		}
		var xy plotter.XYs
		for b := range n {
			if n[b] > 0 {
				xy = append(xy, plotter.XY{X: sp[b] / n[b], Y: so[b] / n[b]})
			}
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = palette[i%len(palette)], palette[i%len(palette)]
		p.Add(l, pts)
		p.Legend.Add("version "+v, l, pts)
	}
	return p, nil
}

func render(title string, mk func() (*plot.Plot, error)) (*figure, error) {
	p, err := mk()
	if err != nil {
		return nil, fmt.Errorf("plot %s: %w", title, err)
	}
	c := vgsvg.New(5*vg.Inch, 3*vg.Inch)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("render svg: %w", err)
	}
	//nolint:gosec // G203: the URL is our own base64 SVG, not user input
	return &figure{Title: title, URL: template.URL("data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(buf.Bytes()))}, nil
}

// WriteHTML writes the report as one HTML page.
func WriteHTML(w io.Writer, rep *Report) error {
	if err := page.Execute(w, rep); err != nil {
		return fmt.Errorf("render accuracy report: %w", err)
	}
	return nil
}

func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return fmt.Sprintf("%.3g", v)
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{"num": num}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Online accuracy: {{.Service}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222}
h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}tr.worse td{background:#fdecea}
.figures{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}figure img{width:480px;max-width:100%;border:1px solid #eee}
figcaption{font-size:.8em;color:#555}
</style></head><body>
<h1>Online accuracy of {{.Service}}</h1>
<p>{{.Pairs}} predictions joined to their outcomes, predicted since {{.Since.Format "2006-01-02 15:04 MST"}}; generated {{.Generated.Format "2006-01-02 15:04 MST"}}.
Intervals are 95 % normal intervals of the mean (±1.96 standard errors).</p>
{{range .Outputs}}
<h2 id="output-{{.Name}}">{{.Name}} against {{.Observed}} ({{.Kind}})</h2>
<div class="figures">
{{with .Over}}<figure><img src="{{.URL}}" alt="{{.Title}}"><figcaption>{{.Title}}</figcaption></figure>{{end}}
{{with .Resid}}<figure><img src="{{.URL}}" alt="{{.Title}}"><figcaption>{{.Title}}</figcaption></figure>{{end}}
{{with .Calib}}<figure><img src="{{.URL}}" alt="{{.Title}}"><figcaption>{{.Title}}</figcaption></figure>{{end}}
</div>
<h3>Worst slices</h3>
{{if .Worst}}<table id="worst-{{.Name}}"><tr><th>version</th><th>slice</th><th>pairs</th><th>{{if .Binary}}log loss{{else}}MAE{{end}}</th><th>× the version's all</th></tr>
{{$b := .Binary}}{{range .Worst}}<tr><td>{{.Version}}</td><td>{{.Slice}}</td><td class="n">{{.N}}</td><td class="n">{{if $b}}{{num .LogLoss}}{{else}}{{num .MAE}} ± {{num .MAECI}}{{end}}</td><td class="n">{{num .Ratio}}</td></tr>
{{end}}</table>{{else}}<p>No slice has enough pairs to rank.</p>{{end}}
<h3>Per version and slice</h3>
<table id="slices-{{.Name}}"><tr><th>version</th><th>slice</th><th>pairs</th>{{if .Binary}}<th>accuracy</th><th>log loss</th>{{else}}<th>MAE ± 95 %</th><th>bias ± 95 %</th><th>RMSE</th>{{end}}<th>× all</th></tr>
{{$b := .Binary}}{{range .Rows}}<tr{{if gt .Ratio 1.25}} class="worse"{{end}}><td>{{.Version}}</td><td>{{.Slice}}</td><td class="n">{{.N}}</td>{{if $b}}<td class="n">{{num .Accuracy}}</td><td class="n">{{num .LogLoss}}</td>{{else}}<td class="n">{{num .MAE}} ± {{num .MAECI}}</td><td class="n">{{num .Bias}} ± {{num .BiasCI}}</td><td class="n">{{num .RMSE}}</td>{{end}}<td class="n">{{num .Ratio}}</td></tr>
{{end}}</table>
{{else}}<p>No joined pairs in the period.</p>{{end}}
</body></html>
`))
