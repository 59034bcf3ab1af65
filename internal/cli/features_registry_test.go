package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFeaturesPlanApply(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("feature_store.yaml", "project: p\n")
	write("d.yaml", "entities:\n  - {name: user, join_keys: [user_id], value_type: Int64}\nfeature_views:\n  - {name: v, entities: [usr], source: s, schema: [{name: f, dtype: Float32}]}\n")
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Run(t.Context(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, sub := range []string{"plan", "apply"} {
		code, out, errOut := run("features", sub, "--repo", dir)
		if code != 1 || !strings.Contains(out, "d.yaml:4: feature view 'v': entity 'usr' is not defined") ||
			!strings.Contains(out, "d.yaml:4: feature view 'v': source 's' is not defined") || !strings.Contains(errOut, "2 definition error(s)") {
			t.Fatalf("%s: code %d, stdout %q, stderr %q", sub, code, out, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "registry.json")); !os.IsNotExist(err) {
		t.Fatalf("apply with errors wrote the registry: %v", err)
	}
	write("d.yaml", "entities:\n  - {name: user, join_keys: [user_id], value_type: Int64}\nsources: [{name: s, path: s.parquet, timestamp_field: ts}]\nfeature_views:\n  - {name: v, entities: [user], source: s, schema: [{name: f, dtype: Float32}]}\n")
	if code, out, errOut := run("features", "apply", "--repo", dir); code != 0 || !strings.Contains(out, "3 to add") || !strings.Contains(out, "Applied") {
		t.Fatalf("apply: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := run("features", "plan", "--repo", dir); code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("plan after apply: code %d, stdout %q", code, out)
	}

	// Schema changes: plan names what each does to the stored values;
	// apply refuses a type change unless told.
	defs := func(schema string) string {
		return "entities:\n  - {name: user, join_keys: [user_id], value_type: Int64}\nsources: [{name: s, path: s.parquet, timestamp_field: ts}]\nfeature_views:\n  - {name: v, entities: [user], source: s, schema: [" + schema + "]}\n"
	}
	write("d.yaml", defs("{name: f, dtype: Float32}, {name: g, dtype: Float32}"))
	if code, out, errOut := run("features", "apply", "--repo", dir); code != 0 || !strings.Contains(out, "schema: + g Float32\n        g reads NOT_FOUND for rows stored before this change until the view is re-materialized") {
		t.Fatalf("apply append: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	write("d.yaml", defs("{name: g, dtype: Float32}, {name: f, dtype: Float32}"))
	if code, out, _ := run("features", "plan", "--repo", dir); code != 0 || !strings.Contains(out, "schema: features reordered\n        harmless: stored rows are read by feature name") {
		t.Fatalf("plan reorder: code %d, stdout %q", code, out)
	}
	write("d.yaml", defs("{name: f, dtype: Float64}, {name: g, dtype: Float32}"))
	code, out, errOut := run("features", "apply", "--repo", dir)
	if code != 1 || !strings.Contains(out, "schema: ~ f Float32 → Float64") || !strings.Contains(errOut, "apply refused: changing the type of v:f Float32 → Float64") ||
		!strings.Contains(errOut, "--allow-type-change") || strings.Contains(out, "Applied") {
		t.Fatalf("apply retype: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := run("features", "plan", "--repo", dir); code != 0 || !strings.Contains(out, "schema: ~ f Float32 → Float64") {
		t.Fatalf("the refused apply wrote the registry: code %d, stdout %q", code, out)
	}
	if code, out, errOut := run("features", "apply", "--repo", dir, "--allow-type-change"); code != 0 || !strings.Contains(out, "Applied") {
		t.Fatalf("apply --allow-type-change: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := run("features", "plan", "--repo", dir); code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("plan after apply --allow-type-change: code %d, stdout %q", code, out)
	}
}
