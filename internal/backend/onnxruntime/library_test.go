package onnxruntime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFindLibrary(t *testing.T) {
	dir := t.TempDir()
	touch := func(p string) string {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("lib"), 0o644))
		return p
	}
	flagLib := touch(filepath.Join(dir, "flag", "libonnxruntime.so.1"))
	envLib := touch(filepath.Join(dir, "env", "libonnxruntime.so.1"))
	ortDirLib := touch(filepath.Join(dir, "ortdir", "libonnxruntime.so.1"))
	xdgLib := touch(filepath.Join(dir, "xdg", "sluice", "onnxruntime-1.30.0", "libonnxruntime.so.1"))
	homeLib := touch(filepath.Join(dir, "home", ".cache", "sluice", "onnxruntime-1.30.0", "libonnxruntime.so.1"))
	missing := filepath.Join(dir, "nowhere", "libonnxruntime.so.1")

	tests := []struct {
		name    string
		flag    string
		env     map[string]string
		want    string
		wantErr string // substring; the path that was looked at
	}{
		{name: "flag wins over env", flag: flagLib, env: map[string]string{LibraryEnv: envLib}, want: flagLib},
		{name: "env wins over cache", env: map[string]string{LibraryEnv: envLib, DirEnv: filepath.Dir(ortDirLib)}, want: envLib},
		{name: "SLUICE_ORT_DIR wins over XDG", env: map[string]string{DirEnv: filepath.Dir(ortDirLib), "XDG_CACHE_HOME": filepath.Join(dir, "xdg")}, want: ortDirLib},
		{name: "XDG cache", env: map[string]string{"XDG_CACHE_HOME": filepath.Join(dir, "xdg")}, want: xdgLib},
		{name: "home cache", env: map[string]string{"HOME": filepath.Join(dir, "home")}, want: homeLib},
		{name: "missing flag path is an error", flag: missing, env: map[string]string{LibraryEnv: envLib}, wantErr: missing},
		{name: "missing env path is an error", env: map[string]string{LibraryEnv: missing}, wantErr: missing},
		{name: "directory is not a library", flag: dir, wantErr: dir},
		{
			name: "nothing installed", env: map[string]string{"HOME": filepath.Join(dir, "empty")},
			wantErr: filepath.Join(dir, "empty", ".cache", "sluice", "onnxruntime-1.30.0", "libonnxruntime.so.1"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{LibraryEnv, DirEnv, "XDG_CACHE_HOME"} {
				t.Setenv(k, "")
			}
			t.Setenv("HOME", filepath.Join(dir, "empty"))
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, err := FindLibrary(tc.flag)
			if tc.wantErr != "" {
				require.Error(t, err)
				msg := err.Error()
				require.Contains(t, msg, tc.wantErr)
				require.Contains(t, msg, "scripts/install-onnxruntime.sh")
				require.Contains(t, msg, "SLUICE_ONNXRUNTIME_LIB")
				require.NotContains(t, msg, "\n", "the error must be one line")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestNotFoundIsOneLine(t *testing.T) {
	err := notFound("/a\nb")
	require.False(t, strings.ContainsAny(err.Error(), "\r\n"))
}
