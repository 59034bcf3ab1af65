package cli

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A listener asked for port 0 shows in --ports-file with the port the
// system chose, one that answers; the file is gone once removed, and no
// flag writes nothing.
func TestPortsFile(t *testing.T) {
	g, err := newGuard(nil, io.Discard, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	defer g.close()
	ln, err := g.listen(t.Context(), "models_http", "127.0.0.1:0", nil, nil, "open")
	require.NoError(t, err)
	defer ln.Close()

	path := filepath.Join(t.TempDir(), "ports.json")
	remove, err := g.writePortsFile(path)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var got portsFile
	require.NoError(t, json.Unmarshal(b, &got), "%s", b)
	require.Equal(t, []listenerInfo{{Name: "models_http", Addr: ln.Addr().String(), TLS: "off", Auth: "open"}}, got.Listeners)
	require.NotEqual(t, "127.0.0.1:0", got.Listeners[0].Addr)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left beside it")

	remove()
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)

	remove, err = g.writePortsFile("")
	require.NoError(t, err)
	remove()

	_, err = g.writePortsFile(filepath.Join(t.TempDir(), "missing", "ports.json"))
	require.ErrorContains(t, err, "write --ports-file")
}
