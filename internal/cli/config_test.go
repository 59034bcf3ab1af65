package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("gateway:\n  listen: \":8080\"\n  lisen: x\n  admin: \":8080\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  []string
	}{
		{
			name: "example", args: []string{"config", "check", "-c", "../../examples/parcel-eta/sluice.yaml"},
			wantOut: "sluice.yaml: ok",
		},
		{
			name: "bad", args: []string{"config", "check", "-c", bad}, wantCode: 1,
			wantErr: []string{bad + `:3:3: gateway.lisen: unknown field (did you mean "listen"?)`, bad + ": invalid"},
		},
		{
			name: "missing", args: []string{"config", "check", "--config", filepath.Join(dir, "nope.yaml")}, wantCode: 1,
			wantErr: []string{"no such file"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Run(t.Context(), tt.args, &out, &errOut)
			if code != tt.wantCode {
				t.Fatalf("exit code = %d, want %d; stderr:\n%s", code, tt.wantCode, errOut.String())
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("stdout = %q, want it to contain %q", out.String(), tt.wantOut)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("stderr = %q, want it to contain %q", errOut.String(), w)
				}
			}
		})
	}
}
