package python

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Triton's qa/L0_infer test.sh starts the server with
// --backend-config=python,stub-timeout-seconds=120 and
// --backend-config=python,shm-default-byte-size=1048576; refusing them
// kept every L0_infer case from running.
func TestParseSettingsTritonPythonSettings(t *testing.T) {
	o, err := ParseSettings(map[string]string{
		"stub-timeout-seconds":   "120",
		"shm-default-byte-size":  "1048576",
		"shm-growth-byte-size":   "1048576",
		"shm-region-prefix-name": "prefix0",
	})
	require.NoError(t, err)
	require.Equal(t, 120*time.Second, o.StartTimeout)

	o, err = ParseSettings(map[string]string{"stub-timeout-seconds": "120", "start-timeout": "5s"})
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, o.StartTimeout, "start-timeout wins over Triton's stub-timeout-seconds")

	for k, v := range map[string]string{
		"stub-timeout-seconds":   "0",
		"shm-default-byte-size":  "-1",
		"shm-growth-byte-size":   "lots",
		"shm-region-prefix-name": " ",
		"shm-no-such-thing":      "1",
	} {
		_, err := ParseSettings(map[string]string{k: v})
		require.Error(t, err, "%s=%q", k, v)
	}
}

// A PyTorch model's worker finds the in-process engine's BLAS first on its
// LD_LIBRARY_PATH, ahead of the server's own folders; without such a
// folder the server's LD_LIBRARY_PATH passes through untouched.
func TestWorkerEnvTorchLibraryDirs(t *testing.T) {
	base := []string{"PATH=/bin", "LD_LIBRARY_PATH=/opt/lib", "OMP_NUM_THREADS=3"}
	lookup := func(env []string, key string) (string, int) {
		val, n := "", 0
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == key {
				val, n = v, n+1
			}
		}
		return val, n
	}
	env := workerEnv(base, 2, 4, []string{"/cache/blas"})
	if v, n := lookup(env, "LD_LIBRARY_PATH"); v != "/cache/blas:/opt/lib" || n != 1 {
		t.Errorf("LD_LIBRARY_PATH = %q (%d times), want /cache/blas:/opt/lib once", v, n)
	}
	if v, _ := lookup(env, "OMP_NUM_THREADS"); v != "3" {
		t.Errorf("OMP_NUM_THREADS = %q, want the server's 3", v)
	}
	env = workerEnv(base[:1], 2, 4, []string{"/cache/blas", "/other"})
	if v, _ := lookup(env, "LD_LIBRARY_PATH"); v != "/cache/blas:/other" {
		t.Errorf("LD_LIBRARY_PATH = %q, want /cache/blas:/other", v)
	}
	if v, _ := lookup(env, "OMP_NUM_THREADS"); v != "2" {
		t.Errorf("OMP_NUM_THREADS = %q, want 4 cores / 2 instances", v)
	}
	env = workerEnv(base, 1, 4, nil)
	if v, n := lookup(env, "LD_LIBRARY_PATH"); v != "/opt/lib" || n != 1 {
		t.Errorf("without folders LD_LIBRARY_PATH = %q (%d times), want the server's", v, n)
	}
}
