package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wants returns the "# want: " lines of a test file.
func wants(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	for line := range strings.Lines(string(data)) {
		if w, ok := strings.CutPrefix(strings.TrimSpace(line), "# want: "); ok {
			out = append(out, w)
		}
	}
	return out
}

// writeRepo makes a repository in a temporary folder from files.
func writeRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	}
	return dir
}

// requireErrors checks that err is Errors holding exactly one error
// containing each of want.
func requireErrors(t *testing.T, err error, want []string) {
	t.Helper()
	var errs Errors
	require.True(t, errors.As(err, &errs), "error %v is not registry.Errors", err)
	got := make([]string, len(errs))
	for i, e := range errs {
		got[i] = e.Error()
	}
	for _, w := range want {
		n := 0
		for _, g := range got {
			if strings.Contains(g, w) {
				n++
			}
		}
		require.Equal(t, 1, n, "want exactly one error containing %q; got:\n%s", w, strings.Join(got, "\n"))
	}
	require.Len(t, got, len(want), "got:\n%s", strings.Join(got, "\n"))
}

func TestLoadGood(t *testing.T) {
	paths, err := filepath.Glob("testdata/good/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", filepath.Base(p): string(data)})
			r, err := Load(t.Context(), dir)
			require.NoError(t, err)
			require.NotEmpty(t, r.Views)
			require.NotEmpty(t, r.Services)
		})
	}
}

func TestLoadBadDefinitions(t *testing.T) {
	paths, err := filepath.Glob("testdata/bad/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			want := wants(t, data)
			require.NotEmpty(t, want, "test file has no # want: lines")
			dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", filepath.Base(p): string(data)})
			_, err = Load(t.Context(), dir)
			requireErrors(t, err, want)
		})
	}
}

func TestLoadBadConfig(t *testing.T) {
	paths, err := filepath.Glob("testdata/badconfig/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			dir := writeRepo(t, map[string]string{ConfigFile: string(data)})
			_, err = Load(t.Context(), dir)
			requireErrors(t, err, wants(t, data))
		})
	}
}

func TestLoadAllErrorsAcrossFiles(t *testing.T) {
	// Problems in the config and in two files come back together, config
	// first and then by file and line.
	dir := writeRepo(t, map[string]string{
		ConfigFile:  "project: p\nonline_store: {type: memcached}\n",
		"a.yaml":    "entities:\n  - {name: user, join_keys: [id], value_type: Int64}\n  - {name: user, join_keys: [id], value_type: Int64}\n",
		"sub/b.yml": "feature_views:\n  - name: v\n    entities: [user]\n    source: missing\n    schema: [{name: f, dtype: Float32}]\n",
	})
	_, err := Load(t.Context(), dir)
	requireErrors(t, err, []string{
		"feature_store.yaml:2: feature_store.yaml: online_store type \"memcached\"",
		"a.yaml:3: entity 'user': name is already used by entity 'user' at a.yaml:2",
		"sub/b.yml:4: feature view 'v': source 'missing' is not defined (sources: none)",
	})
	lines := strings.Split(err.Error(), "\n")
	require.True(t, strings.HasPrefix(lines[0], "feature_store.yaml:"), lines[0])
	require.True(t, strings.HasPrefix(lines[2], "sub/b.yml:"), lines[2])
}

func TestLoadNotARepository(t *testing.T) {
	_, err := Load(t.Context(), t.TempDir())
	require.ErrorContains(t, err, "no feature_store.yaml")
}

func TestLoadHotEntitiesFile(t *testing.T) {
	defsYAML := `entities: [{name: user, join_keys: [user_id], value_type: Int64}]
sources: [{name: s, path: s.parquet, timestamp_field: ts}]
feature_views:
  - name: v
    entities: [user]
    source: s
    ttl: 1h
    schema: [{name: f, dtype: Float32}]
    hot: {entities_file: hot/users.txt, ttl: 10m}
`
	t.Run("ok", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{
			ConfigFile: "project: p\n", "d.yaml": defsYAML,
			"hot/users.txt": "# top users\n7\n\n9\n",
		})
		r, err := Load(t.Context(), dir)
		require.NoError(t, err)
		require.Len(t, r.Views["v"].Hot.Keys, 2)
		require.Equal(t, int64(9), r.Views["v"].Hot.Keys[1].I64)
	})
	t.Run("bad key names the keys file", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{
			ConfigFile: "project: p\n", "d.yaml": defsYAML,
			"hot/users.txt": "7\nseven\n",
		})
		_, err := Load(t.Context(), dir)
		requireErrors(t, err, []string{`hot/users.txt:2: feature view 'v': hot key "seven": not an Int64`})
	})
	t.Run("missing file", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "d.yaml": defsYAML})
		_, err := Load(t.Context(), dir)
		requireErrors(t, err, []string{`d.yaml:9: feature view 'v': hot entities_file "hot/users.txt": cannot read it`})
	})
}

func TestParseTTL(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "", want: "0s"},
		{in: "24h", want: "24h0m0s"},
		{in: "7d", want: "168h0m0s"},
		{in: "1d12h", want: "36h0m0s"},
		{in: "3600", want: "1h0m0s"},
		{in: "0", want: "0s"},
		{in: "-5", wantErr: true},
		{in: "-1h", wantErr: true},
		{in: "soon", wantErr: true},
		{in: "99999999999999d", wantErr: true},
		{in: "99999999999999999", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTTL(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.String())
		})
	}
}

func TestLoadMergeKeyBomb(t *testing.T) {
	// Merge keys nested through aliases must not be expanded
	// exponentially (a fuzzing-style denial of service).
	var b strings.Builder
	b.WriteString("x0: &x0 {name: user}\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "x%d: &x%d {<<: [*x%d, *x%d, *x%d, *x%d]}\n", i, i, i-1, i-1, i-1, i-1)
	}
	b.WriteString("entities:\n  - {<<: *x30, join_keys: [id], value_type: Int64}\n")
	dir := writeRepo(t, map[string]string{ConfigFile: "project: p\n", "d.yaml": b.String()})
	done := make(chan error, 1)
	go func() { _, err := Load(t.Context(), dir); done <- err }()
	select {
	case err := <-done:
		require.Error(t, err) // x0…x30 are unknown sections
	case <-time.After(10 * time.Second):
		t.Fatal("Load did not finish in 10s")
	}
}
