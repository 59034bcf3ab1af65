package diff

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"gonum.org/v1/plot/vg"

	"github.com/sluice-ml/sluice/internal/release/ks"
)

func TestWriteReport(t *testing.T) {
	res := analyze(t, Input{A: FromRecords(regionScenario(600)...)}, Options{
		Slices: []SliceKey{{Name: "x-region"}, {Source: SourceFeature, Name: "route_features__distance_km", Edges: []float64{3, 6}}},
	})
	dir := filepath.Join(t.TempDir(), "out")
	if err := Write(dir, res); err != nil {
		t.Fatalf("Write: %v", err)
	}

	// report.json round-trips to the same result.
	f, err := os.Open(filepath.Join(dir, JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := ReadJSON(f)
	if err != nil {
		t.Fatalf("ReadJSON: %v", err)
	}
	var a, b bytes.Buffer
	if err := WriteJSON(&a, res); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&b, back); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Fatal("report.json does not round-trip")
	}
	for _, field := range []string{`"schema": 1`, `"passed": false`, `"failed": [`, `"significant_share": `, `"p_value": `, `"p95_ms": `, `"slices": [`, `"worst": [`, `"missing_share": `} {
		if !strings.Contains(a.String(), field) {
			t.Errorf("report.json lacks %s", field)
		}
	}

	page, err := os.ReadFile(filepath.Join(dir, HTMLFile))
	if err != nil {
		t.Fatal(err)
	}
	checkBalanced(t, page)
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("parse report.html: %v", err)
	}
	var plots int
	ids := map[string]bool{}
	var text strings.Builder
	for n := range doc.Descendants() {
		switch n.Type {
		case html.TextNode:
			text.WriteString(n.Data)
		case html.ElementNode:
			if n.DataAtom == atom.Script || n.DataAtom == atom.Link || n.DataAtom == atom.Iframe {
				t.Errorf("report.html has a <%s>: it must be script-free and self-contained", n.Data)
			}
			for _, at := range n.Attr {
				switch at.Key {
				case "id":
					ids[at.Val] = true
				case "src", "href":
					if !strings.HasPrefix(at.Val, "data:") && !strings.HasPrefix(at.Val, "#") {
						t.Errorf("<%s %s=%q> loads an external resource", n.Data, at.Key, at.Val)
					}
				}
			}
			if n.DataAtom == atom.Img && attr(n, "class") == "plot" {
				plots++
				checkSVG(t, attr(n, "src"), attr(n, "alt"))
			}
		case html.ErrorNode, html.DocumentNode, html.CommentNode, html.DoctypeNode, html.RawNode:
		}
	}
	// Per output: distribution, CDF and Δ; one latency plot; one slice
	// plot per slice key.
	if want := 3*len(res.Outputs) + 1 + len(res.Slices); plots != want {
		t.Errorf("%d plots, want %d", plots, want)
	}
	for _, id := range []string{"verdict", "summary", "gates", "failed-gates", "outputs", "output-eta_prediction", "latency", "slices", "worst", "worst-eta_prediction"} {
		if !ids[id] {
			t.Errorf("report.html has no element #%s", id)
		}
	}
	body := text.String()
	for _, s := range []string{"FAILED", "significant_share[eta_prediction]@x-region=eu", "ks[eta_prediction]@x-region=eu", res.Worst[0].Examples[0].RequestID, "route_features__distance_km", "[3,6)", "p95"} {
		if !strings.Contains(body, s) {
			t.Errorf("report.html text lacks %q", s)
		}
	}
}

// checkBalanced tokenizes page and requires every non-void element to be
// closed in order: the browser would repair a broken page silently.
func checkBalanced(t *testing.T, page []byte) {
	t.Helper()
	void := map[string]bool{"meta": true, "img": true, "br": true, "hr": true, "link": true, "input": true}
	var stack []string
	z := html.NewTokenizer(bytes.NewReader(page))
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			if !errors.Is(z.Err(), io.EOF) {
				t.Fatalf("tokenize report.html: %v", z.Err())
			}
			if len(stack) > 0 {
				t.Fatalf("unclosed elements at end of page: %v", stack)
			}
			return
		case html.StartTagToken:
			name, _ := z.TagName()
			if !void[string(name)] {
				stack = append(stack, string(name))
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if len(stack) == 0 || stack[len(stack)-1] != string(name) {
				t.Fatalf("</%s> closes %v", name, stack)
			}
			stack = stack[:len(stack)-1]
		case html.SelfClosingTagToken, html.TextToken, html.CommentToken, html.DoctypeToken:
		}
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// checkSVG decodes a plot's data URL and requires well-formed SVG that
// draws something.
func checkSVG(t *testing.T, src, alt string) {
	t.Helper()
	const prefix = "data:image/svg+xml;base64,"
	if !strings.HasPrefix(src, prefix) {
		t.Errorf("plot %q: src is not an SVG data URL", alt)
		return
	}
	svg, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(src, prefix))
	if err != nil {
		t.Errorf("plot %q: %v", alt, err)
		return
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var root string
	var paths int
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("plot %q: SVG is not well-formed: %v", alt, err)
			return
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "path" {
				paths++
			}
		}
	}
	if root != "svg" || paths < 5 {
		t.Errorf("plot %q: root <%s> with %d paths", alt, root, paths)
	}
}

// A result with no data still renders: no plots, no template errors.
func TestWriteReportEmpty(t *testing.T) {
	res := analyze(t, Input{A: FromRecords()}, Options{Slices: []SliceKey{{Name: "x-region"}}})
	var buf bytes.Buffer
	if err := WriteHTML(&buf, res); err != nil {
		t.Fatalf("WriteHTML: %v", err)
	}
	checkBalanced(t, buf.Bytes())
	if !strings.Contains(buf.String(), "No output was compared") || strings.Contains(buf.String(), `class="plot"`) {
		t.Fatal("empty report should say nothing was compared and have no plots")
	}
	// Lists are empty, never null, so consumers can iterate them blindly.
	var js bytes.Buffer
	if err := WriteJSON(&js, res); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "null") {
		t.Fatalf("report.json of an empty result has a null:\n%s", js.String())
	}
	if err := Write(t.TempDir(), nil); err == nil {
		t.Fatal("Write(nil) succeeded")
	}
}

func TestReadJSONRejectsOtherSchema(t *testing.T) {
	if _, err := ReadJSON(strings.NewReader(`{"schema": 2}`)); err == nil || !strings.Contains(err.Error(), "schema 2") {
		t.Fatalf("ReadJSON: %v", err)
	}
}

// TestPlotsFitTheirImage: a long title is broken and shrunk to the
// plot's width, and the inset leaves room for half of the widest x tick
// label past the axis end (gonum centres labels on their ticks).
func TestPlotsFitTheirImage(t *testing.T) {
	st := &OutputStats{Name: "a_rather_long_output_name_for_a_model", KS: ks.Result{Statistic: 0.35331, PValue: 5.86e-18}}
	var av, bv []float64
	for i := range 400 {
		av = append(av, 1000+float64(i)*2.5)
		bv = append(bv, 1010+float64(i)*2.5)
	}
	st.CDF = newCDF(av, bv)
	p, err := cdfPlot(st, "primary", "shadow")
	if err != nil || p == nil {
		t.Fatalf("cdfPlot: %v", err)
	}
	if _, err := svgURL(p); err != nil {
		t.Fatal(err)
	}
	if w := titleWidth(p); w > plotW-2*plotPad {
		t.Errorf("title %q is %v wide, the plot has %v", p.Title.Text, w, plotW-2*plotPad)
	}
	if !strings.Contains(p.Title.Text, "\n(KS D = ") {
		t.Errorf("the long title was not broken before its figures: %q", p.Title.Text)
	}
	var widest vg.Length
	for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		widest = max(widest, p.X.Tick.Label.Width(tk.Label))
	}
	if widest/2 > plotPad {
		t.Errorf("the widest x label is %v: half of it overflows a %v inset", widest, plotPad)
	}
}
