package diff

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Colours of the two sides in every plot.
var (
	colorA    = color.NRGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colorB    = color.NRGBA{R: 0xd6, G: 0x5f, B: 0x0e, A: 0xff}
	fillA     = color.NRGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0x70}
	fillB     = color.NRGBA{R: 0xd6, G: 0x5f, B: 0x0e, A: 0x70}
	colorGate = color.NRGBA{R: 0xb0, G: 0x00, B: 0x20, A: 0xff}
)

const (
	plotW   = 5 * vg.Inch
	plotH   = 3 * vg.Inch
	plotPad = vg.Inch / 4 // inset on the left and right, half of it at the top and bottom
	// titleRoom is the width a title line may measure: the plot's width
	// inside the inset, less a margin for a wider browser font.
	titleRoom = (plotW - 2*plotPad) * 3 / 4
)

// fitTitle breaks a title too wide for the plot before its parenthesis
// (the figures), and shrinks the font of a line that still does not fit.
// The width is measured with gonum's font, but the browser draws the SVG
// with its own sans-serif (DejaVu Sans on Debian: about a fifth wider),
// so a line must fit in titleRoom, not the whole plot width.
func fitTitle(p *plot.Plot) {
	room := titleRoom
	if titleWidth(p) <= room {
		return
	}
	if i := strings.Index(p.Title.Text, " ("); i > 0 && !strings.Contains(p.Title.Text, "\n") {
		p.Title.Text = p.Title.Text[:i] + "\n" + p.Title.Text[i+1:]
	}
	for p.Title.TextStyle.Font.Size > 6 && titleWidth(p) > room {
		p.Title.TextStyle.Font.Size--
	}
}

// titleWidth is the width of the title's widest line.
func titleWidth(p *plot.Plot) vg.Length {
	var w vg.Length
	for line := range strings.SplitSeq(p.Title.Text, "\n") {
		w = max(w, p.Title.TextStyle.Width(line))
	}
	return w
}

// svgURL renders p as SVG and returns it as a data: URL, so the report
// needs no other file and no network. The SVG goes into an <img>, which
// also keeps the plots' element ids from colliding in one page.
func svgURL(p *plot.Plot) (template.URL, error) {
	c := vgsvg.New(plotW, plotH)
	fitTitle(p)
	// gonum centres each tick label on its tick, so the last x label
	// sticks out past the axis end: an inset keeps it (and the title)
	// inside the image.
	p.Draw(draw.Crop(draw.New(c), plotPad, -plotPad, plotPad/2, -plotPad/2))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("render svg: %w", err)
	}
	//nolint:gosec // G203: the URL is our own base64 SVG, not user input
	return template.URL("data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())), nil
}

func histBins(h *Histogram, counts []int) []plotter.HistogramBin {
	bins := make([]plotter.HistogramBin, len(counts))
	for i, c := range counts {
		bins[i] = plotter.HistogramBin{Min: h.Edges[i], Max: h.Edges[i+1], Weight: float64(c)}
	}
	return bins
}

func newHist(h *Histogram, counts []int, fill, line color.Color) *plotter.Histogram {
	ph := &plotter.Histogram{
		Bins:      histBins(h, counts),
		Width:     h.Edges[1] - h.Edges[0],
		FillColor: fill,
		LineStyle: plotter.DefaultLineStyle,
	}
	ph.Color = line
	ph.LineStyle.Width = vg.Points(0.5) // not ph.Width: Histogram has its own (bin) Width
	return ph
}

// valuesPlot overlays both sides' histograms of one output.
func valuesPlot(st *OutputStats, labelA, labelB string) (*plot.Plot, error) {
	h := st.Histogram
	if h == nil || len(h.Edges) < 2 || len(h.A) != len(h.Edges)-1 || len(h.B) != len(h.A) {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = st.Name + ": distribution"
	p.X.Label.Text = st.Name
	p.Y.Label.Text = "count"
	ha, hb := newHist(h, h.A, fillA, colorA), newHist(h, h.B, fillB, colorB)
	p.Add(ha, hb)
	p.Legend.Add(labelA, ha)
	p.Legend.Add(labelB, hb)
	p.Legend.Top = true
	return p, nil
}

// cdfPlot draws both sides' empirical CDFs of one output.
func cdfPlot(st *OutputStats, labelA, labelB string) (*plot.Plot, error) {
	c := st.CDF
	if c == nil || len(c.X) == 0 || len(c.A) != len(c.X) || len(c.B) != len(c.X) {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: empirical CDF (KS D = %.3f, p = %.3g)", st.Name, st.KS.Statistic, st.KS.PValue)
	p.X.Label.Text = st.Name
	p.Y.Label.Text = "share ≤ x"
	p.Y.Min, p.Y.Max = 0, 1
	for _, s := range []struct {
		label string
		ys    []float64
		col   color.Color
	}{{labelA, c.A, colorA}, {labelB, c.B, colorB}} {
		xy := make(plotter.XYs, len(c.X))
		for i := range c.X {
			xy[i] = plotter.XY{X: c.X[i], Y: s.ys[i]}
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, fmt.Errorf("cdf line: %w", err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = s.col
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.label, l)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.YOffs = vg.Points(20)
	return p, nil
}

// deltaPlot is the histogram of Δ with the significance threshold marked.
func deltaPlot(st *OutputStats, threshold float64, relative bool) (*plot.Plot, error) {
	h := st.DeltaHistogram
	if h == nil || len(h.Edges) < 2 || len(h.A) != len(h.Edges)-1 {
		return nil, nil
	}
	p := plot.New()
	what := "Δ = B − A"
	if relative {
		what = "Δ = (B − A)/|A|"
	}
	p.Title.Text = fmt.Sprintf("%s: per-element %s (threshold ±%g)", st.Name, what, threshold)
	p.X.Label.Text = "Δ"
	p.Y.Label.Text = "count"
	hd := newHist(h, h.A, color.NRGBA{R: 0x55, G: 0x55, B: 0x55, A: 0x90}, color.Black)
	p.Add(hd)
	maxCount := 0
	for _, c := range h.A {
		maxCount = max(maxCount, c)
	}
	lo, hi := h.Edges[0], h.Edges[len(h.Edges)-1]
	for _, x := range []float64{-threshold, threshold} {
		if x < lo || x > hi {
			continue // off the plotted range: no deviation reaches it
		}
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: float64(max(maxCount, 1))}})
		if err != nil {
			return nil, fmt.Errorf("threshold line: %w", err)
		}
		l.Color = colorGate
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
	}
	return p, nil
}

// latencyPlot compares p50/p95/p99 of both sides as grouped bars.
func latencyPlot(l *Latency, labelA, labelB string) (*plot.Plot, error) {
	if l.A.N == 0 && l.B.N == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "latency percentiles"
	p.Y.Label.Text = "ms"
	w := vg.Points(18)
	ba, err := plotter.NewBarChart(plotter.Values{l.A.P50, l.A.P95, l.A.P99}, w)
	if err != nil {
		return nil, fmt.Errorf("latency bars: %w", err)
	}
	bb, err := plotter.NewBarChart(plotter.Values{l.B.P50, l.B.P95, l.B.P99}, w)
	if err != nil {
		return nil, fmt.Errorf("latency bars: %w", err)
	}
	ba.Color, bb.Color = colorA, colorB
	ba.LineStyle.Width, bb.LineStyle.Width = 0, 0
	ba.Offset, bb.Offset = -w/2, w/2
	p.Add(ba, bb)
	p.Legend.Add(labelA, ba)
	p.Legend.Add(labelB, bb)
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX("p50", "p95", "p99")
	return p, nil
}

// maxSlicePlotGroups bounds the bars of a slice plot; the table below it
// still lists every group.
const maxSlicePlotGroups = 40

// slicePlot shows one output's significant share per slice group, with
// the gate's limit as a line.
func slicePlot(rep *SliceReport, output string, limit float64) (*plot.Plot, error) {
	var vals plotter.Values
	var names []string
	for _, g := range rep.Groups {
		for _, o := range g.Outputs {
			if o.Name == output {
				vals = append(vals, 100*o.SignificantShare)
				names = append(names, g.Value)
			}
		}
		if len(vals) == maxSlicePlotGroups {
			break
		}
	}
	if len(vals) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s by %s: share of requests with |Δ| > threshold", output, rep.Key.Name)
	p.Y.Label.Text = "% significant"
	bars, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return nil, fmt.Errorf("slice bars: %w", err)
	}
	bars.Color = colorB
	bars.LineStyle.Width = 0
	p.Add(bars)
	if limit >= 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 100 * limit}, {X: float64(len(vals)) - 0.5, Y: 100 * limit}})
		if err != nil {
			return nil, fmt.Errorf("limit line: %w", err)
		}
		l.Color = colorGate
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
	}
	p.NominalX(names...)
	p.Y.Min = 0
	return p, nil
}
