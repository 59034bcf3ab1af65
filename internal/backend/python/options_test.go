package python

import (
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
