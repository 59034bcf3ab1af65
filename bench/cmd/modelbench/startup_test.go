package main

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMeasureStartupWaitsForReady(t *testing.T) {
	t.Setenv(fakeServeEnv, "ready")
	d, err := measureStartup(t.Context(), os.Args[0], []string{t.TempDir()}, 20*time.Second)
	require.NoError(t, err)
	require.GreaterOrEqual(t, d, 100*time.Millisecond, "a 503 from /v2/health/ready is not ready")
	require.Less(t, d, 10*time.Second)
}

func TestMeasureStartupReportsEarlyExit(t *testing.T) {
	t.Setenv(fakeServeEnv, "crash")
	_, err := measureStartup(t.Context(), os.Args[0], []string{t.TempDir()}, 20*time.Second)
	require.ErrorContains(t, err, "exited before ready")
	require.ErrorContains(t, err, "cannot load models", "the server's own output explains the failure")
}

func TestMeasureStartupMissingBinary(t *testing.T) {
	_, err := measureStartup(t.Context(), t.TempDir()+"/no-such-sluice", nil, time.Second)
	require.Error(t, err)
}
