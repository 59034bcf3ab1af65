package cli

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	code, out, errOut := runCLI(t, "version")
	if code != 0 {
		t.Fatalf("version: exit %d %s", code, errOut)
	}
	for _, want := range []string{"sluice " + Version, "commit", "go            " + runtime.Version(), "onnxruntime   "} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
	// Without a library at the path given, the runtime version is not
	// made up.
	_, out, _ = runCLI(t, "version", "--onnxruntime-library", t.TempDir()+"/missing.so")
	if !strings.Contains(out, "onnxruntime   not loaded (") {
		t.Errorf("version with a missing library:\n%s", out)
	}
	_, flagOut, _ := runCLI(t, "--version")
	if !strings.HasPrefix(flagOut, "sluice "+Version+"\n  commit") {
		t.Errorf("--version:\n%s", flagOut)
	}
}

func TestArgumentErrorsPrintUsage(t *testing.T) {
	code, _, errOut := runCLI(t, "rollout", "status", "a", "b")
	if code != 1 || !strings.Contains(errOut, "accepts at most 1 arg(s)") || !strings.Contains(errOut, "Usage:\n  sluice rollout status [SERVICE]") {
		t.Errorf("rollout status a b = %d\n%s", code, errOut)
	}
	code, _, errOut = runCLI(t, "serve", "--no-such-flag")
	if code != 1 || !strings.Contains(errOut, "unknown flag: --no-such-flag") || !strings.Contains(errOut, "Usage:") {
		t.Errorf("serve --no-such-flag = %d\n%s", code, errOut)
	}
}

func TestEnumFlagCompletion(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--log-level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"serve", "--model-control-mode", ""}, []string{"none", "poll", "explicit"}},
		{[]string{"perf", "--protocol", ""}, []string{"http", "grpc"}},
		{[]string{"feature-server", "--log-format", ""}, []string{"json", "text"}},
	} {
		_, out, _ := runCLI(t, append([]string{"__complete"}, c.args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		got := lines[:len(lines)-1] // the last line is the directive
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("completion of %v = %q, want %q", c.args, got, c.want)
		}
	}
}

func TestModelServerHasNoChainFlags(t *testing.T) {
	_, out, _ := runCLI(t, "model-server", "--help")
	for _, f := range []string{"--config", "--materialize"} {
		if strings.Contains(out, f) {
			t.Errorf("model-server --help lists %s", f)
		}
	}
	_, out, _ = runCLI(t, "serve", "--help")
	if !strings.Contains(out, "-c, --config") || !strings.Contains(out, "--materialize") {
		t.Errorf("serve --help lacks -c or --materialize")
	}
}

// TestStampedVersion: without -ldflags, the version and commit come from
// the build info Go stamps into the binary.
func TestStampedVersion(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	info := func(main string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/sluice-ml/sluice", Version: main}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, c := range []struct {
		name            string
		info            *debug.BuildInfo
		version, commit string // -ldflags
		wantV, wantC    string
	}{
		{"plain go build", info("(devel)", "vcs.revision", rev, "vcs.modified", "false"), defaultVersion, "", defaultVersion, rev},
		{"modified tree", info("(devel)", "vcs.revision", rev, "vcs.modified", "true"), defaultVersion, "", defaultVersion, rev + "-dirty"},
		{"go install of a tag", info("v1.4.2", "vcs.revision", rev), defaultVersion, "", "1.4.2", rev},
		{"no VCS stamp", info("(devel)"), defaultVersion, "", defaultVersion, "unknown"},
		{"no build info", nil, defaultVersion, "", defaultVersion, "unknown"},
		{"ldflags win", info("v1.4.2", "vcs.revision", rev), "2.0.0", "cafe", "2.0.0", "cafe"},
		{"ldflags version only", info("v1.4.2", "vcs.revision", rev), "2.0.0", "", "2.0.0", rev},
	} {
		v, commit := stampedVersion(c.info, c.version, c.commit)
		if v != c.wantV || commit != c.wantC {
			t.Errorf("%s: got %s %s, want %s %s", c.name, v, commit, c.wantV, c.wantC)
		}
	}
}
