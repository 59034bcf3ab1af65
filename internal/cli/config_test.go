package cli

import (
	"bytes"
	"fmt"
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
			// The seeds' two-model layout: routes naming parcel_eta_hot
			// and parcel_eta_cold, one signature.
			name: "hot/cold example", args: []string{"config", "check", "-c", "../../examples/parcel-eta-hotcold/sluice.yaml"},
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

// TestConfigCheckReportsEverything plants four mistakes of different kinds
// in a copy of the example config (an unknown key, a value of the wrong
// type, route weights that do not sum to 100, a feature the feature
// service lacks) and checks that one run reports each once, at its
// file:line:col, and exits 1.
func TestConfigCheckReportsEverything(t *testing.T) {
	path, text := patchedExample(t, "parcel-eta/sluice.yaml", func(abs string) []replacement {
		return []replacement{
			{"model_repository: [../models]", "model_repository: [" + abs + "/models]"},
			{"  repo: features", "  repo: " + abs + "/parcel-eta/features"},
			{"  drain_period: 2s", "  drain_perod: 2s"},                 // unknown key
			{"          timeout: 500ms\n", "          timeout: fast\n"}, // not a duration (the first route's)
			{"{backend: local, version: \"2\", weight: 10}", "{backend: local, version: \"2\", weight: 20}"},
			{"          - user_stats:u_f07\n", "          - user_stats:u_f77\n"},
		}
	})
	lineOf := func(s string) int {
		i := strings.Index(text, s)
		if i < 0 {
			t.Fatalf("no %q in the test config", s)
		}
		return strings.Count(text[:i], "\n") + 1
	}
	var out, errOut bytes.Buffer
	code := Run(t.Context(), []string{"config", "check", "-c", path}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errOut.String())
	}
	for _, want := range []string{
		fmt.Sprintf("%s:%d:3: gateway.drain_perod: unknown field (did you mean \"drain_period\"?)", path, lineOf("drain_perod")),
		fmt.Sprintf("%s:%d:20: gateway.services[0].routes[0].timeout: \"fast\" is not a duration", path, lineOf("timeout: fast")),
		fmt.Sprintf("%s:%d:", path, lineOf("weighted:\n              - {backend: local, version: \"1\", weight: 90}")),
		"gateway.services[0].routes[1].route.weighted: weights sum to 110, want 100",
		fmt.Sprintf("%s:%d:13: gateway.services[0].inputs[0].features[7]: ", path, lineOf("- user_stats:u_f77")),
		`"user_stats:u_f77"`,
		"invalid (4 problems)",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("config check output lacks %q:\n%s", want, errOut.String())
		}
	}
	if n := strings.Count(errOut.String(), "weights sum to 110"); n != 1 {
		t.Errorf("the weights problem is reported %d times, want once:\n%s", n, errOut.String())
	}
}

// TestConfigCheckSyntaxErrorLine checks that a YAML syntax error is
// reported on the line where it is, not where its enclosing block starts.
func TestConfigCheckSyntaxErrorLine(t *testing.T) {
	for _, c := range []struct {
		text string
		line int
	}{
		{"gateway:\n  listen: \":8080\"\n  admin: [1, 2\n  grpc: \":8081\"\n", 3},
		{"model_server:\n  http_port: 8000\n grpc_port: 8001\n", 3},
		{"gateway:\n  listen: \":8080\"\n\tadmin: x\n", 3},
		{"a: 1\nb: 2\nc: 3\n  d: 4\n", 4},
	} {
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := Run(t.Context(), []string{"config", "check", "-c", path}, &out, &errOut)
		if want := fmt.Sprintf("%s:%d:", path, c.line); code != 1 || !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "YAML syntax") {
			t.Errorf("%q: exit %d, want 1 and %q in:\n%s", c.text, code, want, errOut.String())
		}
	}
}

// TestConfigCheckRouteModelSignature: a route may name another model, but
// only one that takes what the service builds and returns what it reads;
// config check names the route's model and what disagrees.
func TestConfigCheckRouteModelSignature(t *testing.T) {
	path, _ := patchedExample(t, "parcel-eta-hotcold/sluice.yaml", func(abs string) []replacement {
		return []replacement{
			{"model_repository: [models]", "model_repository: [" + abs + "/parcel-eta-hotcold/models, " + abs + "/models]"},
			{"  repo: ../parcel-eta/features", "  repo: " + abs + "/parcel-eta/features"},
			{"{backend: local, model: parcel_eta_hot, weight: 100}", "{backend: local, model: digits, weight: 100}"},
		}
	})
	var out, errOut bytes.Buffer
	if code := Run(t.Context(), []string{"config", "check", "-c", path}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{
		`model "digits" version "1" on backend "local": input "user_features": the model has no such input`,
		`model "digits" version "1" on backend "local": output "eta_minutes": the model has no output "eta_prediction"`,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("config check output lacks %q:\n%s", want, errOut.String())
		}
	}
	if strings.Contains(errOut.String(), `model "parcel_eta_cold"`) {
		t.Errorf("the cold model matches the service:\n%s", errOut.String())
	}
}

// replacement is one edit patchedExample makes.
type replacement struct{ old, new string }

// patchedExample writes a copy of examples/<file> with each replacement
// made once (edits gets the examples folder's absolute path) and returns
// its path and text.
func patchedExample(t *testing.T, file string, edits func(abs string) []replacement) (string, string) {
	t.Helper()
	example, err := os.ReadFile(filepath.Join("../../examples", file))
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	text := string(example)
	for _, r := range edits(abs) {
		if !strings.Contains(text, r.old) {
			t.Fatalf("examples/%s no longer has %q", file, r.old)
		}
		text = strings.Replace(text, r.old, r.new, 1)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, text
}
