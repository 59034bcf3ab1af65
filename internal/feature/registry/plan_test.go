package registry

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlanSchemaChanges: the plan names each schema change and what it
// does to the values already in the online store.
func TestPlanSchemaChanges(t *testing.T) {
	view := func(online bool, fields ...string) *Snapshot {
		v := SnapshotView{Name: "v", Entities: []string{"user"}, TTL: "1h0m0s", Online: online, Source: "s", StalePolicy: "withhold"}
		for _, f := range fields {
			name, dtype, _ := strings.Cut(f, " ")
			v.Schema = append(v.Schema, SnapshotField{Name: name, Dtype: dtype})
		}
		return &Snapshot{Version: SnapshotVersion, Project: "p", Views: []SnapshotView{v}}
	}
	old := []string{"a Float32", "b Float32", "n Int64"}
	tests := []struct {
		name      string
		cur       *Snapshot
		want      []string // parts of the plan, in order
		wantTypes []string
	}{
		{
			name: "reorder two same-type features",
			cur:  view(true, "b Float32", "a Float32", "n Int64"),
			want: []string{
				"~ feature view 'v'",
				"    schema: features reordered",
				"        harmless: stored rows are read by feature name",
				"    online store: stored rows stay readable; the next materialization rewrites them under the new schema",
			},
		},
		{
			name: "append one",
			cur:  view(true, "a Float32", "b Float32", "n Int64", "c String"),
			want: []string{
				"    schema: + c String",
				"        c reads NOT_FOUND for rows stored before this change until the view is re-materialized",
				"    online store: the values above are unavailable until the view is re-materialized or pushed to; materialization rewrites rows of the old schema even when their event time is unchanged",
			},
		},
		{
			name: "remove one",
			cur:  view(true, "a Float32", "n Int64"),
			want: []string{
				"    schema: - b Float32",
				"        b is no longer served",
				"    online store: stored rows stay readable",
			},
		},
		{
			name: "retype one",
			cur:  view(true, "a Float32", "b Float32", "n Float64"),
			want: []string{
				"    schema: ~ n Int64 → Float64",
				"        stored n values read NOT_FOUND until the view is re-materialized (never reinterpreted); apply needs --allow-type-change",
				"    online store: the values above are unavailable",
			},
			wantTypes: []string{"v:n Int64 → Float64"},
		},
		{
			name: "remove and reorder the rest",
			cur:  view(true, "n Int64", "a Float32"),
			want: []string{"    schema: - b Float32", "    schema: features reordered"},
		},
		{
			name: "an offline-only view has no online consequences",
			cur:  view(false, "b Float32", "a Float32", "n Int64"),
			want: []string{"    schema: features reordered", "    online: true → false"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, WritePlan(&out, Diff(view(true, old...), tt.cur)))
			got := out.String()
			at := 0
			for _, w := range tt.want {
				i := strings.Index(got[at:], w)
				require.GreaterOrEqual(t, i, 0, "want line %q (in order) in:\n%s", w, got)
				at += i + len(w)
			}
			if !tt.cur.Views[0].Online {
				require.NotContains(t, got, "online store:")
			}
			require.Equal(t, tt.wantTypes, TypeChanges(view(true, old...), tt.cur))
		})
	}
	require.Nil(t, TypeChanges(nil, view(true, old...)), "nothing applied yet: nothing retyped")
}
