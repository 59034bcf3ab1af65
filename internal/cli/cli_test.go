package cli

import (
	"bytes"
	"strings"
	"testing"
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

func TestParseCommits(t *testing.T) {
	got, err := parseCommits([]string{"parcel_eta=abc1234"})
	if err != nil || got["parcel_eta"] != "abc1234" {
		t.Fatalf("parseCommits = %v, %v", got, err)
	}
	if _, err := parseCommits([]string{"parcel_eta"}); err == nil {
		t.Error("a value without = was accepted")
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
