package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The console's links out and the tracing exporter are checked, each
// problem named by its key.
func TestConsoleLinksAndTracingExporter(t *testing.T) {
	ok := "gateway:\n  console:\n    grafana_url: https://grafana.example.test\n    trace_url: http://jaeger.example.test:16686/trace/{trace_id}\n" +
		"tracing:\n  exporter: console\n  file: spans.jsonl\n"
	cfg, err := Parse("s.yaml", []byte(ok), nil)
	require.NoError(t, err)
	require.Equal(t, "https://grafana.example.test", cfg.Gateway.Console.GrafanaURL)
	require.Equal(t, "console", cfg.Tracing.Exporter)
	cfg, err = Load(writeTemp(t, "gateway:\n  console: {history_file: state/console.json}\n"))
	require.NoError(t, err)
	require.True(t, filepath.IsAbs(cfg.Gateway.Console.HistoryFile) && strings.HasSuffix(cfg.Gateway.Console.HistoryFile, "/state/console.json"),
		"relative to the config file: %s", cfg.Gateway.Console.HistoryFile)

	for _, tt := range []struct{ doc, want string }{
		{"gateway:\n  console: {grafana_url: grafana.local}\n", "gateway.console.grafana_url: \"grafana.local\": want an absolute http or https URL"},
		{"gateway:\n  console: {trace_url: \"http://jaeger/trace/\"}\n", "gateway.console.trace_url: \"http://jaeger/trace/\" has no {trace_id}"},
		{"tracing: {exporter: zipkin}\n", "tracing.exporter: \"zipkin\": want otlp, console or none"},
		{"tracing: {exporter: otlp, file: x.jsonl}\n", "tracing.file: only the console exporter writes a file"},
	} {
		_, err := Parse("s.yaml", []byte(tt.doc), nil)
		require.ErrorContains(t, err, tt.want)
	}
}

func writeTemp(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(p, []byte(doc), 0o600))
	return p
}
