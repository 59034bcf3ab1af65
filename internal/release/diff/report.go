package diff

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
)

// Report file names written by Write.
const (
	JSONFile = "report.json"
	HTMLFile = "report.html"
)

// Write writes res to dir as report.json and report.html, creating dir
// if needed. Both are rendered before either is written, so a rendering
// error leaves no half-written report.
func Write(dir string, res *Result) error {
	if res == nil {
		return errors.New("no result to write")
	}
	var js, page bytes.Buffer
	if err := WriteJSON(&js, res); err != nil {
		return err
	}
	if err := WriteHTML(&page, res); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create report dir: %w", err)
	}
	for name, data := range map[string][]byte{JSONFile: js.Bytes(), HTMLFile: page.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// WriteJSON writes res as indented JSON (the report.json format).
func WriteJSON(w io.Writer, res *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return fmt.Errorf("encode report json: %w", err)
	}
	return nil
}

// ReadJSON decodes a report.json written by WriteJSON.
func ReadJSON(r io.Reader) (*Result, error) {
	var res Result
	if err := json.NewDecoder(r).Decode(&res); err != nil {
		return nil, fmt.Errorf("decode report json: %w", err)
	}
	if res.Schema != ReportSchema {
		return nil, fmt.Errorf("report schema %d not supported (want %d)", res.Schema, ReportSchema)
	}
	return &res, nil
}

//go:embed report.html.tmpl
var reportTemplate string

var pageTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"num":  fmtNum,
	"pct":  func(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) },
	"pval": func(v float64) string { return fmt.Sprintf("%.3g", v) },
	"ksverdict": func(v string) string {
		switch v {
		case KSSignificant:
			return "SIGNIFICANT SHIFT"
		case KSBelowMinEffect:
			return "significant but below the minimum effect"
		case KSNotSignificant:
			return "not significant"
		}
		return "—"
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"signed": func(v float64) string { return fmt.Sprintf("%+.1f%%", 100*v) },
	"models": func(m map[string]int) string {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s (%d)", k, m[k]))
		}
		return strings.Join(parts, ", ")
	},
	"any": func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	},
	"sortedKeys": func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) },
	"headerKeys": func(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) },
	"add":        func(a, b int) int { return a + b },
}).Parse(reportTemplate))

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1e6 || math.Abs(v) < 1e-3:
		return fmt.Sprintf("%.3e", v)
	default:
		return fmt.Sprintf("%.4g", v)
	}
}

// figure is one rendered plot.
type figure struct {
	Title string
	URL   template.URL
}

type outputView struct {
	*OutputStats
	Figures []figure
}

type sliceView struct {
	*SliceReport
	Outputs []string
	Figures []figure
}

type pageView struct {
	*Result
	Title         string
	FailedGates   []Gate
	PassedGates   []Gate
	OutputViews   []outputView
	LatencyFigure *figure
	SliceViews    []sliceView
}

// WriteHTML renders res as a self-contained HTML page: inline CSS, plots
// as inline SVG data URLs, no scripts and no external resources.
func WriteHTML(w io.Writer, res *Result) error {
	v := pageView{Result: res, Title: "Shadow diff: PASSED"}
	if !res.Passed {
		v.Title = fmt.Sprintf("Shadow diff: FAILED (%d gates)", len(res.Failed))
	}
	for _, g := range res.Gates {
		if g.Passed {
			v.PassedGates = append(v.PassedGates, g)
		} else {
			v.FailedGates = append(v.FailedGates, g)
		}
	}
	for i := range res.Outputs {
		st := &res.Outputs[i]
		ov := outputView{OutputStats: st}
		for _, mk := range []struct {
			title string
			fn    func() (*plot.Plot, error)
		}{
			{"distribution of " + st.Name, func() (*plot.Plot, error) { return valuesPlot(st, res.A.Label, res.B.Label) }},
			{"empirical CDF of " + st.Name, func() (*plot.Plot, error) { return cdfPlot(st, res.A.Label, res.B.Label) }},
			{"Δ of " + st.Name, func() (*plot.Plot, error) { return deltaPlot(st, res.Options.Threshold, res.Options.Relative) }},
		} {
			f, err := render(mk.title, mk.fn)
			if err != nil {
				return err
			}
			if f != nil {
				ov.Figures = append(ov.Figures, *f)
			}
		}
		v.OutputViews = append(v.OutputViews, ov)
	}
	f, err := render("latency percentiles", func() (*plot.Plot, error) { return latencyPlot(&res.Latency, res.A.Label, res.B.Label) })
	if err != nil {
		return err
	}
	v.LatencyFigure = f
	for i := range res.Slices {
		rep := &res.Slices[i]
		sv := sliceView{SliceReport: rep}
		for _, o := range res.Outputs {
			sv.Outputs = append(sv.Outputs, o.Name)
			f, err := render(o.Name+" by "+rep.Key.Name, func() (*plot.Plot, error) {
				return slicePlot(rep, o.Name, res.Options.MaxSignificantShare)
			})
			if err != nil {
				return err
			}
			if f != nil {
				sv.Figures = append(sv.Figures, *f)
			}
		}
		v.SliceViews = append(v.SliceViews, sv)
	}
	if err := pageTmpl.Execute(w, v); err != nil {
		return fmt.Errorf("render report html: %w", err)
	}
	return nil
}

func render(title string, mk func() (*plot.Plot, error)) (*figure, error) {
	p, err := mk()
	if err != nil {
		return nil, fmt.Errorf("plot %s: %w", title, err)
	}
	if p == nil {
		return nil, nil
	}
	u, err := svgURL(p)
	if err != nil {
		return nil, fmt.Errorf("plot %s: %w", title, err)
	}
	return &figure{Title: title, URL: u}, nil
}
