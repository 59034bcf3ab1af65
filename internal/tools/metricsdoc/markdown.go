package metricsdoc

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DocPath is where the generated reference lives, relative to the
// repository root.
const DocPath = "docs/metrics.md"

// intro opens docs/metrics.md; the tables after it are generated.
const intro = `# Metrics reference

<!-- Generated from the components' registries by
     go test ./internal/tools/metricsdoc -update
     Do not edit by hand: the test fails when this file and the code differ. -->

Every metric a Sluice process exports on ` + "`/metrics`" + `, by the component that
registers it. Each component serves its own families on its own port, also
under ` + "`sluice serve -c`" + `, which runs the model server (its metrics port), the
feature server (its HTTP port) and the gateway (its admin port) in one process:
scrape all three (` + "`deploy/prometheus/prometheus.yml`" + `) and nothing counts
twice. The process's own series (` + "`go_*`" + `, ` + "`process_*`" + `, listener admission and
security) come with the gateway's admin port in a chain.

- **Names** follow ` + "`sluice_<component>_<name>_<unit>`" + ` with base units
  (seconds, bytes) and ` + "`_total`" + ` on counters.
- **Histograms** are classic: each exposes ` + "`<name>_bucket{le=…}`" + `,
  ` + "`<name>_sum`" + ` and ` + "`<name>_count`" + `; the bucket bounds are listed (≈ marks a
  rounded bound). Those marked *native* also offer native buckets to a scraper
  that negotiates them; Prometheus 2.42 without
  ` + "`--enable-feature=native-histograms`" + ` scrapes the classic series only.
- **Labels** take bounded values only: model and version names from the model
  repositories, service, route, backend and endpoint names from the
  configuration, view names from the feature repository, and closed sets
  (reasons, results, codes).

The Grafana dashboards in ` + "`deploy/grafana/`" + ` query only these families; a test
checks every panel against this inventory.
`

// Markdown renders fams as docs/metrics.md: the introduction, then one
// table per component, in Components order, sorted by name.
func Markdown(fams []Family) []byte {
	fams = slices.Clone(fams)
	sortFamilies(fams)
	var b bytes.Buffer
	b.WriteString(intro)
	for _, comp := range Components {
		first := true
		for _, f := range fams {
			if f.Component != comp {
				continue
			}
			if first {
				fmt.Fprintf(&b, "\n## %s\n\n| Metric | Type | Labels | Meaning |\n|---|---|---|---|\n", comp)
				first = false
			}
			typ := f.Type
			if f.Native {
				typ += " (native too)"
			}
			labels := "—"
			if len(f.Labels) > 0 {
				labels = "`" + strings.Join(f.Labels, "`, `") + "`"
			}
			meaning := cell(f.Help)
			if len(f.Buckets) > 0 {
				meaning += "<br>Buckets: " + buckets(f.Buckets)
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, typ, labels, meaning)
		}
	}
	return b.Bytes()
}

// cell makes text safe in a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// buckets formats bucket bounds, rounding long ones to 3 significant
// digits.
func buckets(bs []float64) string {
	parts := make([]string, len(bs))
	for i, v := range bs {
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if len(s) > 8 {
			s = "≈" + strconv.FormatFloat(v, 'g', 3, 64)
		}
		parts[i] = s
	}
	return strings.Join(parts, ", ")
}
