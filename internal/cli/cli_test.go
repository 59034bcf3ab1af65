package cli

import (
	"bytes"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestBackendSettings(t *testing.T) {
	got, err := backendSettings([]string{"onnxruntime,library=/x/lib.so", "onnxruntime,other=1"})
	if err != nil {
		t.Fatal(err)
	}
	if got["onnxruntime"]["library"] != "/x/lib.so" || got["onnxruntime"]["other"] != "1" {
		t.Fatalf("settings = %v", got)
	}
	for _, bad := range []string{"onnxruntime", "onnxruntime,library", ",library=x", "onnxruntime,=x"} {
		if _, err := backendSettings([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("backendSettings(%q) error = %v, want one naming the value", bad, err)
		}
	}
}

// --model-git-commit <model>=<sha> fills model_server.model_git_commit's
// map; a value without a model or a commit is refused when parsed.
func TestModelGitCommitFlag(t *testing.T) {
	cmd, f := serveCommand("serve", "")
	if err := cmd.ParseFlags([]string{"--model-git-commit", "parcel_eta=abc1234", "--model-git-commit", "b=def"}); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"parcel_eta": "abc1234", "b": "def"}; !maps.Equal(f.model.ModelGitCommit, want) {
		t.Fatalf("model_git_commit = %v, want %v", f.model.ModelGitCommit, want)
	}
	if got := cmd.Flags().Lookup("model-git-commit").Value.String(); got != "[b=def,parcel_eta=abc1234]" {
		t.Errorf("the flag prints %s", got)
	}
	for _, bad := range []string{"parcel_eta", "=abc", "parcel_eta="} {
		cmd, _ := serveCommand("serve", "")
		if err := cmd.ParseFlags([]string{"--model-git-commit", bad}); err == nil || !strings.Contains(err.Error(), "want <model>=<sha>") {
			t.Errorf("--model-git-commit %s: error %v", bad, err)
		}
	}
}

// TRITONSERVER_DELAY_SCHEDULER as qa/L0_batcher/test.sh sets it (e.g. 3 for
// batcher_test.py test_multi_batch_use_best_preferred).
func TestDelaySchedulerHook(t *testing.T) {
	env := func(v string, set bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k != delaySchedulerEnv {
				return "", false
			}
			return v, set
		}
	}
	logger := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		v    string
		set  bool
		want int
	}{{"", false, 0}, {"", true, 0}, {"0", true, 0}, {"3", true, 3}} {
		if got, err := delaySchedulerHook(env(tt.v, tt.set), logger); err != nil || got != tt.want {
			t.Errorf("delaySchedulerHook(%q, set %v) = %d, %v; want %d", tt.v, tt.set, got, err, tt.want)
		}
	}
	for _, bad := range []string{"-1", "two", "3.5"} {
		if _, err := delaySchedulerHook(env(bad, true), logger); err == nil || !strings.Contains(err.Error(), delaySchedulerEnv) {
			t.Errorf("delaySchedulerHook(%q) error = %v, want one naming the variable", bad, err)
		}
	}
}

// TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=2 as qa/L0_client_timeout/test.sh
// sets it for client_non_infer_timeout_test.py.
func TestDelayGRPCResponseHook(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == delayGRPCResponseEnv && v != "" }
	}
	if d, err := delayGRPCResponseHook(env(""), logger); err != nil || d != 0 {
		t.Errorf("unset: %v, %v", d, err)
	}
	if d, err := delayGRPCResponseHook(env("2"), logger); err != nil || d != 2*time.Second {
		t.Errorf("2: %v, %v", d, err)
	}
	for _, bad := range []string{"-1", "0.5s"} {
		if _, err := delayGRPCResponseHook(env(bad), logger); err == nil || !strings.Contains(err.Error(), delayGRPCResponseEnv) {
			t.Errorf("%q: error %v, want one naming the variable", bad, err)
		}
	}
}

// --cache-config and --response-cache-byte-size as qa/L0_response_cache/test.sh
// passes them ("--cache-config local,size=10840", "--response-cache-byte-size=8192",
// and the refused combinations).
func TestCacheSizeFlags(t *testing.T) {
	for _, tt := range []struct {
		size, byteSize int64
		configs        []string
		want           int64
		err            string
	}{
		{size: 5, want: 5},
		{byteSize: 8192, want: 8192},
		{byteSize: 12345, configs: []string{"local,size=67890"}, err: "incompatible flags"},
		{size: 1, byteSize: 2, err: "incompatible flags"},
		{configs: []string{"local,size=10840"}, want: 10840},
		{configs: []string{"local,size=1", "local,size=8192"}, want: 8192},
		{configs: []string{"local,size=8192", "redis,key=value"}, err: "multiple cache configurations"},
		{size: 12345, configs: []string{"local,size=67890"}, err: "incompatible flags"},
		{configs: []string{"redis,host=localhost"}, err: "redis cache is not supported"},
		{configs: []string{"local,size=-1"}, err: "number of bytes"},
		{configs: []string{"local"}, err: "want <cache>,<setting>=<value>"},
		{configs: []string{"local,ttl=3"}, err: "one setting, size"},
	} {
		got, err := cacheSizeFlags(tt.size, tt.byteSize, tt.configs)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%d %v: error %v, want %q", tt.size, tt.configs, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%d %v = %d, %v; want %d", tt.size, tt.configs, got, err, tt.want)
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{name: "version", args: []string{"version"}, wantCode: 0, wantOut: "sluice " + Version},
		{name: "unknown command", args: []string{"frobnicate"}, wantCode: 1, wantErr: "unknown command"},
		{name: "serve without repository", args: []string{"serve"}, wantCode: 1, wantErr: "--model-repository is required"},
		{name: "bad control mode", args: []string{"serve", "--model-repository", "x", "--model-control-mode", "sometimes"}, wantCode: 1, wantErr: "want none, poll or explicit"},
		{name: "bad log level", args: []string{"serve", "--log-level", "loud"}, wantCode: 1, wantErr: "unknown log level"},
		{name: "repo check needs a folder", args: []string{"repo", "check"}, wantCode: 1, wantErr: "requires at least 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Run(t.Context(), tt.args, &out, &errb)
			if code != tt.wantCode {
				t.Fatalf("exit code = %d, want %d (stderr %q)", code, tt.wantCode, errb.String())
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("stdout %q lacks %q", out.String(), tt.wantOut)
			}
			if !strings.Contains(errb.String(), tt.wantErr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.wantErr)
			}
		})
	}
}
