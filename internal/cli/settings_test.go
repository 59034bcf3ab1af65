package cli

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/feature/serving"
	"github.com/sluice-ml/sluice/internal/telemetry"
)

// TestServerDefaultsAgree checks that each server setting has one default:
// the flag of sluice serve or sluice feature-server, sluice.yaml's
// default (where the file has the setting) and the docs' tables all say
// the config package's Default constant.
func TestServerDefaultsAgree(t *testing.T) {
	cfg, err := config.Parse("sluice.yaml", []byte("model_server: {model_repository: [models]}\nfeature_server: {repo: features}\ngateway: {}\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	m, fs := cfg.ModelServer, cfg.FeatureServer
	secs := func(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }
	itoa := strconv.Itoa
	type doc struct{ file, row, want string }
	for _, tc := range []struct {
		cmd, flag string
		want      string // the default, as the flag set prints it
		yaml      string // sluice.yaml's default, printed the same way; "" when the file has no such setting
		docs      []doc
	}{
		{
			cmd: "serve", flag: "repository-poll-secs", want: secs(config.DefaultRepositoryPollInterval),
			yaml: secs(m.RepositoryPollInterval.Std()),
			docs: []doc{
				{"model-server.md", "| `--repository-poll-secs`", "`15`"},
				{"gateway-config.md", "| `repository_poll_interval`", "(`15s`)"},
			},
		},
		{
			cmd: "serve", flag: "exit-timeout-secs", want: secs(config.DefaultExitTimeout), yaml: secs(m.ExitTimeout.Std()),
			docs: []doc{
				{"model-server.md", "| `--exit-timeout-secs`", "`30`"},
				{"gateway-config.md", "| `exit_timeout` | at shutdown, how long in-flight requests may take to finish, `--exit-timeout-secs`", "(`30s`)"},
			},
		},
		{
			cmd: "serve", flag: "exit-on-error", want: "false", yaml: strconv.FormatBool(m.ExitOnError),
			docs: []doc{
				{"model-server.md", "| `--exit-on-error`", "`false`"},
				{"gateway-config.md", "| `exit_on_error`", "(`false`"},
			},
		},
		{
			cmd: "serve", flag: "cache-size", want: "0", yaml: strconv.FormatInt(m.CacheSize, 10),
			docs: []doc{
				{"model-server.md", "| `--cache-size BYTES`", "`0`"},
				{"gateway-config.md", "| `cache_size`", "(`0`"},
			},
		},
		{
			cmd: "serve", flag: "triton-metrics", want: strconv.FormatBool(config.DefaultTritonMetrics), yaml: strconv.FormatBool(*m.TritonMetrics),
			docs: []doc{
				{"model-server.md", "| `--triton-metrics`", "`true`"},
				{"gateway-config.md", "| `triton_metrics`", "(`true`)"},
			},
		},
		{
			cmd: "serve", flag: "server-name", want: config.DefaultServerName, yaml: m.ServerName,
			docs: []doc{
				{"model-server.md", "| `--server-name` / `--server-version`", "`sluice` / the build's version"},
				{"gateway-config.md", "| `server_name`, `server_version`", "(`sluice` and the build's version)"},
			},
		},
		{
			cmd: "serve", flag: "compress-min-bytes", want: itoa(config.DefaultCompressMinBytes), yaml: itoa(m.CompressMinBytes),
			docs: []doc{
				{"model-server.md", "| `--compress-min-bytes", "`1024`"},
				{"gateway-config.md", "| `compress_min_bytes`", "(`1024`)"},
			},
		},
		{
			cmd: "serve", flag: "max-output-bytes", want: itoa(config.DefaultMaxOutputBytes), yaml: strconv.FormatInt(m.MaxOutputBytes, 10),
			docs: []doc{
				{"model-server.md", "| `--max-output-bytes", "`67108864`"},
				{"gateway-config.md", "| `max_output_bytes`", "(`67108864`)"},
			},
		},
		{
			cmd: "serve", flag: "repository-cache-bytes", want: itoa(config.DefaultRepositoryCacheBytes),
			yaml: strconv.FormatInt(m.RepositoryCacheBytes, 10),
			docs: []doc{{"model-server.md", "| `--repository-cache-bytes N`", "`21474836480`"}},
		},
		{
			cmd: "serve", flag: "strict-readiness", want: strconv.FormatBool(config.DefaultStrictReadiness),
			docs: []doc{
				{"model-server.md", "| `--strict-readiness`", "`true`"},
				{"gateway-config.md", "| `strict_readiness`", "(`false` under `serve -c`"},
			},
		},
		{
			cmd: "serve", flag: "log-format", want: telemetry.DefaultLogFormat,
			docs: []doc{{"model-server.md", "| `--log-format` / `--log-level`", "`json` / `info`"}},
		},
		{cmd: "serve", flag: "log-level", want: telemetry.DefaultLogLevel},
		{
			cmd: "serve", flag: "model-control-mode", want: config.DefaultControlMode, yaml: m.ControlMode,
			docs: []doc{
				{"model-server.md", "| `--model-control-mode`", "`none`"},
				{"gateway-config.md", "| `control_mode`", "(`none`)"},
			},
		},
		{
			cmd: "serve", flag: "http-port", want: itoa(config.DefaultModelHTTPPort), yaml: itoa(m.HTTPPort),
			docs: []doc{
				{"model-server.md", "| `--http-port` / `--grpc-port` / `--metrics-port`", "`8000` / `8001` / `8002`"},
				{"gateway-config.md", "| `http_port`, `grpc_port`, `metrics_port`", "HTTP (8000), gRPC (8001), Prometheus (8002)"},
			},
		},
		{cmd: "serve", flag: "grpc-port", want: itoa(config.DefaultModelGRPCPort), yaml: itoa(m.GRPCPort)},
		{cmd: "serve", flag: "metrics-port", want: itoa(config.DefaultModelMetricsPort), yaml: itoa(m.MetricsPort)},
		{
			cmd: "serve", flag: "max-request-bytes", want: itoa(config.DefaultModelMaxBodyBytes), yaml: strconv.FormatInt(m.Limits.MaxBodyBytes, 10),
			docs: []doc{{"model-server.md", "| `--max-request-bytes`", "`67108864`"}},
		},
		{
			cmd: "serve", flag: "address", want: config.DefaultListenAddress,
			docs: []doc{{"model-server.md", "| `--address`", "`0.0.0.0`"}},
		},
		{
			cmd: "feature-server", flag: "registry-poll-secs", want: secs(config.DefaultRegistryPollInterval),
			yaml: secs(fs.RegistryPollInterval.Std()),
			docs: []doc{
				{"feature-store.md", "                      [--metrics-port 0]", "[--registry-poll-secs 10]"},
				{"gateway-config.md", "| `registry_poll_interval`", "(`10s`"},
			},
		},
		{
			cmd: "feature-server", flag: "port", want: itoa(config.DefaultFeaturePort), yaml: itoa(fs.Port),
			docs: []doc{
				{"feature-store.md", "sluice feature-server --repo DIR", "[--port 6566]"},
				{"gateway-config.md", "| `port`", "(6566, Feast's)"},
			},
		},
		{
			cmd: "feature-server", flag: "max-entity-rows", want: itoa(config.DefaultMaxEntityRows), yaml: itoa(fs.MaxEntityRows),
			docs: []doc{
				{"feature-store.md", "                      [--max-entity-rows", "[--max-entity-rows 10000]"},
				{"gateway-config.md", "| `max_entity_rows`", "(10000)"},
			},
		},
		{
			cmd: "feature-server", flag: "read-auth", want: config.DefaultReadAuth, yaml: fs.ReadAuth,
			docs: []doc{{"gateway-config.md", "| `read_auth`", "(`open`)"}},
		},
		{
			cmd: "feature-server", flag: "max-request-bytes", want: itoa(config.DefaultFeatureMaxBodyBytes), yaml: strconv.FormatInt(fs.Limits.MaxBodyBytes, 10),
			docs: []doc{{"feature-store.md", "                      [--metrics-port 0]", "[--max-request-bytes 16777216]"}},
		},
		{
			cmd: "feature-server", flag: "exit-timeout-secs", want: secs(config.DefaultExitTimeout), yaml: secs(fs.ExitTimeout.Std()),
			docs: []doc{{"gateway-config.md", "| `exit_timeout` | at shutdown, how long in-flight requests may take to finish, as `sluice feature-server", "(`30s`)"}},
		},
		{
			cmd: "feature-server", flag: "log-format", want: telemetry.DefaultLogFormat,
			docs: []doc{{"feature-store.md", "                      [--event-time-tolerance", "[--log-format json]"}},
		},
		{
			cmd: "feature-server", flag: "log-level", want: telemetry.DefaultLogLevel,
			docs: []doc{{"feature-store.md", "                      [--event-time-tolerance", "[--log-level info]"}},
		},
		{
			cmd: "feature-server", flag: "event-time-tolerance", want: serving.DefaultEventTimeTolerance.String(),
			docs: []doc{{"feature-store.md", "                      [--event-time-tolerance", "[--event-time-tolerance 5m]"}},
		},
		{cmd: "feature-server", flag: "address", want: config.DefaultListenAddress},
	} {
		t.Run(tc.cmd+"/"+tc.flag, func(t *testing.T) {
			cmd := newServeCmd("serve", "")
			if tc.cmd == "feature-server" {
				cmd = newFeatureServerCmd()
			}
			fl := cmd.Flags().Lookup(tc.flag)
			if fl == nil {
				t.Fatalf("%s has no --%s", tc.cmd, tc.flag)
			}
			if fl.DefValue != tc.want {
				t.Errorf("--%s defaults to %s, the config package's default is %s", tc.flag, fl.DefValue, tc.want)
			}
			if tc.yaml != "" && tc.yaml != tc.want {
				t.Errorf("sluice.yaml defaults to %s, --%s to %s", tc.yaml, tc.flag, tc.want)
			}
			for _, d := range tc.docs {
				line := docLine(t, d.file, d.row)
				if !strings.Contains(line, d.want) {
					t.Errorf("docs/%s says\n%s\nwant it to contain %q", d.file, line, d.want)
				}
			}
		})
	}
	// Under serve -c readiness is not strict unless the file says so.
	if *m.StrictReadiness {
		t.Errorf("model_server.strict_readiness defaults to true, want false")
	}
	// sluice.yaml's servers bind loopback: only the gateway faces the
	// network under serve -c.
	if m.Address != config.DefaultChainAddress || fs.Address != config.DefaultChainAddress {
		t.Errorf("model_server.address %s, feature_server.address %s, want %s", m.Address, fs.Address, config.DefaultChainAddress)
	}
	if g := cfg.Gateway; g.ExitTimeout.Std() != config.DefaultExitTimeout {
		t.Errorf("gateway.exit_timeout defaults to %s, want %s", g.ExitTimeout.Std(), config.DefaultExitTimeout)
	}
	if line := docLine(t, "gateway-config.md", "| `exit_timeout` | at shutdown, after `drain_period`"); !strings.Contains(line, "(`30s`)") {
		t.Errorf("docs/gateway-config.md says\n%s\nwant the default 30s", line)
	}
	for _, row := range []string{"| `address` | the model server's bind address", "| `address` | the feature server's bind address"} {
		if line := docLine(t, "gateway-config.md", row); !strings.Contains(line, "(`"+config.DefaultChainAddress+"`") {
			t.Errorf("docs/gateway-config.md says\n%s\nwant the default %s", line, config.DefaultChainAddress)
		}
	}
}

// TestRegistryPollIntervalSettable: feature_server.registry_poll_interval
// is what the chain's feature server polls by (startFeatureServer takes
// the file's section as sluice feature-server takes its flags'), and a
// written 0s turns reloading off, as --registry-poll-secs 0 does.
func TestRegistryPollIntervalSettable(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want time.Duration
	}{
		{"feature_server: {repo: f, registry_poll_interval: 3s}\n", 3 * time.Second},
		{"feature_server: {repo: f, registry_poll_interval: 0s}\n", 0},
		{"feature_server: {repo: f}\n", config.DefaultRegistryPollInterval},
	} {
		cfg, err := config.Parse("sluice.yaml", []byte(tc.yaml), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.FeatureServer.RegistryPollInterval.Std(); got != tc.want {
			t.Errorf("%s: poll every %s, want %s", strings.TrimSpace(tc.yaml), got, tc.want)
		}
	}
	f := newFeatureServerCmd()
	if err := f.ParseFlags([]string{"--registry-poll-secs", "0"}); err != nil {
		t.Fatal(err)
	}
	if got := f.Flags().Lookup("registry-poll-secs").Value.String(); got != "0" {
		t.Errorf("--registry-poll-secs 0 reads back %s", got)
	}
}

// TestFlagsSetTheSettingsStructs: the servers' flags write the config
// structs sluice.yaml holds, so that one function starts a server from
// either; the flags' defaults are config.NewModelServer's and
// config.NewFeatureServer's.
func TestFlagsSetTheSettingsStructs(t *testing.T) {
	cmd, got := serveCommand("model-server", "")
	require.Equal(t, config.NewModelServer(), got.model, "the flags' defaults")
	require.NoError(t, cmd.ParseFlags([]string{
		"--model-repository", "a", "--repository-poll-secs", "7", "--max-request-bytes", "1000",
		"--strict-readiness=false", "--address", "127.0.0.1", "--http-port", "1", "--exit-timeout-secs", "3",
		"--trace-otlp-endpoint", "h:4317", "--trace-sample-ratio", "0.5", "--log-format", "text", "--log-level", "warn",
		"--exit-on-error", "--model-git-commit", "m=abc", "--cache-size", "10", "--triton-metrics=false",
		"--server-name", "triton", "--server-version", "2.0", "--http-header-forward-pattern", "h.*",
		"--grpc-header-forward-pattern", "g.*", "--compress-min-bytes", "-1", "--max-output-bytes", "5",
	}))
	want := config.NewModelServer()
	want.ModelRepository = []string{"a"}
	want.RepositoryPollInterval = config.Duration(7 * time.Second)
	want.Limits.MaxBodyBytes = 1000
	want.StrictReadiness = new(false)
	want.Address, want.HTTPPort = "127.0.0.1", 1
	want.ExitTimeout = config.Duration(3 * time.Second)
	want.ExitOnError, want.ModelGitCommit, want.CacheSize, want.TritonMetrics = true, map[string]string{"m": "abc"}, 10, new(false)
	want.ServerName, want.ServerVersion = "triton", "2.0"
	want.HTTPHeaderForwardPattern, want.GRPCHeaderForwardPattern = "h.*", "g.*"
	want.CompressMinBytes, want.MaxOutputBytes = -1, 5
	require.Equal(t, want, got.model)
	require.Equal(t, config.Tracing{OTLPEndpoint: "h:4317", SampleRatio: 0.5}, got.tracing)
	require.Equal(t, telemetry.LogOptions{Format: "text", Level: "warn"}, got.log)

	fcmd, fs := featureServerCommand()
	require.Equal(t, config.NewFeatureServer().Limits, fs.feature.Limits)
	require.NoError(t, fcmd.ParseFlags([]string{"--registry-poll-secs", "4", "--max-request-bytes", "99", "--exit-timeout-secs", "2"}))
	fw := config.NewFeatureServer()
	fw.Repo = "."
	fw.RegistryPollInterval = config.Duration(4 * time.Second)
	fw.Limits.MaxBodyBytes = 99
	fw.ExitTimeout = config.Duration(2 * time.Second)
	require.Equal(t, fw, fs.feature)
}

// docLine is the first line of docs/file that starts with prefix.
func docLine(t *testing.T, file, prefix string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/" + file)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimRight(line, "\n")
		}
	}
	t.Fatalf("docs/%s has no line starting %q", file, prefix)
	return ""
}

// TestFlagsIgnoredUnderConfig: serve -c names the flags given that the
// file replaces, and none of those that apply under it.
func TestFlagsIgnoredUnderConfig(t *testing.T) {
	cmd, _ := serveCommand("serve", "")
	require.NoError(t, cmd.ParseFlags([]string{
		"-c", "s.yaml", "--materialize=false", "--log-format", "text", "--log-level", "warn", "--ports-file", "p",
		"--backend-config", "onnxruntime,library=x", "--strict-readiness=false",
		"--server-name", "x", "--exit-timeout-secs", "1", "--allow-metrics=false",
	}))
	require.Equal(t, []string{"--allow-metrics", "--exit-timeout-secs", "--server-name"}, flagsIgnoredUnderConfig(cmd.Flags()))
	cmd, _ = serveCommand("serve", "")
	require.NoError(t, cmd.ParseFlags([]string{"-c", "s.yaml", "--log-level", "debug"}))
	require.Empty(t, flagsIgnoredUnderConfig(cmd.Flags()))
}
