package cli

import (
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListenErrorTritonWords is modelled on qa/L0_lifecycle/test.sh's port
// collision steps ("GRPC Port Collision Test" and the HTTP and Metrics
// ones), which grep the second server's log for "failed to start GRPC
// service: Unavailable - Socket '0.0.0.0:8001' already in use".
func TestListenErrorTritonWords(t *testing.T) {
	var lc net.ListenConfig
	taken, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	addr := taken.Addr().String()
	_, inUse := lc.Listen(t.Context(), "tcp", addr)
	require.Error(t, inUse)

	for _, tc := range []struct {
		name    string
		service string
		err     error
		want    string
	}{
		{"grpc port taken", "GRPC", inUse, "failed to start GRPC service: Unavailable - Socket '" + addr + "' already in use: "},
		{"metrics port taken", "Metrics", inUse, "failed to start Metrics service: Unavailable - Socket '" + addr + "' already in use: "},
		{"listener Triton lacks", "", inUse, ""},
		{"other error", "HTTP", errors.New("permission denied"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := listenError(tc.service, addr, tc.err)
			require.ErrorIs(t, got, tc.err)
			if tc.want == "" {
				require.Equal(t, tc.err.Error(), got.Error())
				return
			}
			require.Contains(t, got.Error(), tc.want)
		})
	}
}
