package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/registry"
)

// onDemandKind is how list and describe name on-demand feature views.
const onDemandKind = "on-demand views"

// onDemandInfo is an on-demand feature view as list and describe show it.
type onDemandInfo struct {
	Name     string            `json:"name"`
	Sources  []string          `json:"sources"`
	JoinKeys []string          `json:"join_keys"`
	Request  []fieldInfo       `json:"request_fields"`
	Features []odFieldInfo     `json:"features"`
	Tags     map[string]string `json:"tags,omitempty"`
}

type odFieldInfo struct {
	Name       string `json:"name"`
	Dtype      string `json:"dtype"`
	Expression string `json:"expression"`
}

func describeOnDemand(repo *registry.Repo, od *feature.OnDemandView) onDemandInfo {
	oi := onDemandInfo{Name: od.Name, Sources: od.Sources, Tags: od.Tags}
	oi.JoinKeys, _ = repo.JoinKeys(od.Name)
	for _, s := range od.Sources {
		if rs := repo.RequestSources[s]; rs != nil {
			for _, f := range rs.Schema {
				oi.Request = append(oi.Request, fieldInfo{Name: f.Name, Dtype: f.Type.String()})
			}
		}
	}
	for i, f := range od.Schema {
		oi.Features = append(oi.Features, odFieldInfo{Name: f.Name, Dtype: f.Type.String(), Expression: od.Exprs[i]})
	}
	return oi
}

// writeOnDemandTable adds the on-demand views to features list's table.
func (l *listing) writeOnDemandTable(tw *tabwriter.Writer, gap func()) {
	if len(l.OnDemand) == 0 {
		return
	}
	gap()
	fmt.Fprintf(tw, "ON-DEMAND VIEW\tSOURCES\tFEATURES\tJOIN KEYS\n")
	for _, o := range l.OnDemand {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", o.Name, strings.Join(o.Sources, ","), len(o.Features), orDash(strings.Join(o.JoinKeys, ",")))
	}
}

// writeOnDemandDescription prints an on-demand view for describe.
func writeOnDemandDescription(w io.Writer, o onDemandInfo) {
	fmt.Fprintf(w, "on-demand feature view: %s\nsources: %s\njoin keys: %s\n", o.Name, strings.Join(o.Sources, ", "), orDash(strings.Join(o.JoinKeys, ", ")))
	if len(o.Request) > 0 {
		fmt.Fprintln(w, "request fields:")
		for _, f := range o.Request {
			fmt.Fprintf(w, "  %s: %s\n", f.Name, f.Dtype)
		}
	}
	fmt.Fprintln(w, "features:")
	for _, f := range o.Features {
		fmt.Fprintf(w, "  %s: %s = %s\n", f.Name, f.Dtype, f.Expression)
	}
	if len(o.Tags) > 0 {
		fmt.Fprintln(w, "tags:")
		for _, k := range sortedNames(o.Tags) {
			fmt.Fprintf(w, "  %s: %s\n", k, o.Tags[k])
		}
	}
}

// describeRequestSource shows a request source: its typed fields.
func describeRequestSource(rs *feature.RequestSource) sourceInfo {
	si := sourceInfo{Name: rs.Name, Type: "request"}
	for _, f := range rs.Schema {
		si.Schema = append(si.Schema, fieldInfo{Name: f.Name, Dtype: f.Type.String()})
	}
	return si
}
