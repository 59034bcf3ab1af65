package integration_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

func TestBadInputAnswers(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", "examples/models", "--max-request-bytes", "1048576")
	base := "http://" + s.http
	simple := func(in0 string) string {
		return `{"inputs":[` + in0 + `,{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`
	}
	good0 := `{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`
	binBody := func(size int) ([]byte, string) {
		hdr := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"parameters":{"binary_data_size":64}},` +
			`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"parameters":{"binary_data_size":` + itoa(size) + `}}]}`
		return append([]byte(hdr), make([]byte, 64+size)...), itoa(len(hdr))
	}
	cases := []struct {
		name       string
		model      string
		body       []byte
		hdr        map[string]string
		wantStatus int
		wantReason string
		wantInMsg  string
	}{
		{name: "malformed json", model: "simple", body: []byte(`{"inputs":[{"name":"INPUT0",`), wantStatus: 400, wantReason: "invalid_json"},
		{name: "wrong datatype", model: "simple", body: []byte(simple(strings.Replace(good0, `"INT32"`, `"FP32"`, 1))), wantStatus: 400, wantReason: "invalid_datatype", wantInMsg: "INPUT0"},
		{
			name: "wrong shape", model: "parcel_eta", body: []byte(`{"inputs":[{"name":"user_features","datatype":"FP32","shape":[2,127],"data":` + zeros(254) + `},` +
				`{"name":"package_features","datatype":"FP32","shape":[2,64],"data":` + zeros(128) + `},` +
				`{"name":"route_features","datatype":"FP32","shape":[2,32],"data":` + zeros(64) + `}]}`),
			wantStatus: 400, wantReason: "invalid_shape", wantInMsg: "input 'user_features': expected shape [-1,128], got [2,127]",
		},
		{name: "element count", model: "simple", body: []byte(simple(strings.Replace(good0, "15,16]", "15]", 1))), wantStatus: 400, wantInMsg: "INPUT0"},
		{name: "missing input", model: "simple", body: []byte(`{"inputs":[` + good0 + `]}`), wantStatus: 400, wantReason: "missing_input", wantInMsg: "INPUT1"},
		{name: "unknown output", model: "simple", body: []byte(`{"inputs":[` + good0 + `,` + strings.Replace(good0, "INPUT0", "INPUT1", 1) + `],"outputs":[{"name":"OUTPUT9"}]}`), wantStatus: 400, wantReason: "unknown_output", wantInMsg: "OUTPUT9"},
		{name: "unknown model", model: "nope", body: []byte(simple(good0)), wantStatus: 404, wantReason: "model_not_found", wantInMsg: "nope"},
		{name: "oversized body", model: "simple", body: bytes.Repeat([]byte(" "), 2<<20), wantStatus: 400, wantReason: "body_too_large", wantInMsg: "exceeds the maximum allowed input size of"},
	}
	b, hl := binBody(60)
	cases = append(cases, struct {
		name       string
		model      string
		body       []byte
		hdr        map[string]string
		wantStatus int
		wantReason string
		wantInMsg  string
	}{name: "binary size", model: "simple", body: b, hdr: map[string]string{"Inference-Header-Content-Length": hl}, wantStatus: 400, wantInMsg: "INPUT1"})

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, resp := do(t, http.MethodPost, base+"/v2/models/"+tc.model+"/infer", tc.body, tc.hdr)
			if code != tc.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", code, tc.wantStatus, resp)
			}
			var eb errorBody
			if err := json.Unmarshal(resp, &eb); err != nil {
				t.Fatalf("error body %q is not JSON: %v", resp, err)
			}
			if eb.Error == "" || eb.Reason == "" {
				t.Fatalf("error body %s lacks error or reason", resp)
			}
			if tc.wantReason != "" && eb.Reason != tc.wantReason {
				t.Errorf("reason = %q, want %q (error %q)", eb.Reason, tc.wantReason, eb.Error)
			}
			if !strings.Contains(eb.Error, tc.wantInMsg) {
				t.Errorf("error %q does not contain %q", eb.Error, tc.wantInMsg)
			}
		})
	}
	// The server answered every bad request and still serves good ones.
	if code, _, resp := do(t, http.MethodPost, base+"/v2/models/simple/infer", []byte(simple(good0)), nil); code != 200 {
		t.Fatalf("good request after bad ones = %d %s", code, resp)
	}
}

func TestRepoCheck(t *testing.T) {
	t.Parallel()
	run := func(dir string) (string, int) {
		cmd := exec.Command(binPath, "repo", "check", "--backend-config", "onnxruntime,library="+ortLib, dir)
		cmd.Dir = repoDir
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := run("examples/models"); code != 0 {
		t.Fatalf("repo check examples/models exited %d:\n%s", code, out)
	}
	out, code := run("test/integration/testdata/broken-repo")
	if code == 0 {
		t.Fatalf("repo check on a broken repository exited 0:\n%s", out)
	}
	loc := regexp.MustCompile(`(?m)^\S+config\.pbtxt:\d+:\d+: `)
	lines := loc.FindAllString(out, -1)
	if len(lines) < 3 {
		t.Fatalf("want at least 3 problems located as path:line:col, got %d:\n%s", len(lines), out)
	}
	for _, want := range []string{"max_batch_sizee", "KIND_GPU", "INPUT0", "missing_file"} {
		if !strings.Contains(out, want) {
			t.Errorf("repo check output lacks %q:\n%s", want, out)
		}
	}
}

func TestProvenance(t *testing.T) {
	t.Parallel()
	var prov struct {
		Version   string `json:"version"`
		GitCommit string `json:"git_commit"`
	}
	if err := json.Unmarshal(readFile(t, "examples/models/parcel_eta/2/model_config.json"), &prov); err != nil {
		t.Fatal(err)
	}
	t.Run("label in metadata and logs", func(t *testing.T) {
		s := startServer(t, "--model-repository", "examples/models", "--model-git-commit", "parcel_eta="+prov.GitCommit)
		code, _, body := do(t, http.MethodGet, "http://"+s.http+"/v2/models/parcel_eta", nil, nil)
		if code != 200 || !strings.Contains(string(body), prov.Version) || !strings.Contains(string(body), prov.GitCommit) {
			t.Errorf("metadata %d %s lacks version label %q and commit", code, body, prov.Version)
		}
		if !strings.Contains(s.logs.String(), prov.Version) {
			t.Errorf("logs lack the version label %q", prov.Version)
		}
	})
	t.Run("git mismatch refuses the load", func(t *testing.T) {
		s := startServer(t, "--model-repository", "examples/models", "--model-git-commit", "parcel_eta="+strings.Repeat("0", 40))
		base := "http://" + s.http
		var refused bool
		for _, e := range repoIndex(t, base) {
			if e.Name == "parcel_eta" && e.State == "UNAVAILABLE" && strings.Contains(e.Reason, "model_git_mismatch") {
				refused = true
			}
		}
		if !refused {
			t.Errorf("index %+v: want parcel_eta UNAVAILABLE with model_git_mismatch", repoIndex(t, base))
		}
		if code, _, _ := do(t, http.MethodGet, base+"/v2/models/simple/ready", nil, nil); code != 200 {
			t.Errorf("simple not ready beside the refused model")
		}
	})
}

func TestMissingRuntimeNamesTheScript(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binPath, "serve", "--model-repository", "examples/models", "--address", "127.0.0.1",
		"--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
	cmd.Dir = repoDir
	cmd.Env = append(os.Environ(), "SLUICE_ONNXRUNTIME_LIB=", "SLUICE_ORT_DIR=", "XDG_CACHE_HOME="+t.TempDir(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("serve without the runtime exited 0:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "scripts/install-onnxruntime.sh") {
		t.Fatalf("want one line naming scripts/install-onnxruntime.sh, got:\n%s", out)
	}
}

func zeros(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]"
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
