package integration_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// simpleRequest reads examples/requests/simple.json and returns its inputs.
func simpleInputs(t *testing.T) (in0, in1 []float64) {
	t.Helper()
	var req struct {
		Inputs []struct {
			Name string    `json:"name"`
			Data []float64 `json:"data"`
		} `json:"inputs"`
	}
	if err := json.Unmarshal(readFile(t, "examples/requests/simple.json"), &req); err != nil {
		t.Fatal(err)
	}
	for _, in := range req.Inputs {
		switch in.Name {
		case "INPUT0":
			in0 = in.Data
		case "INPUT1":
			in1 = in.Data
		}
	}
	if len(in0) != 16 || len(in1) != 16 {
		t.Fatalf("examples/requests/simple.json: want 16 values per input, got %d and %d", len(in0), len(in1))
	}
	return in0, in1
}

func TestServeExamples(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--model-repository", "examples/models")
	t.Logf("start-up to live: %v", s.startup)
	base := "http://" + s.http

	t.Run("ready", func(t *testing.T) {
		for _, path := range []string{"/v2/health/ready", "/v2/models/simple/ready", "/v2/models/parcel_eta/versions/2/ready", "/v2/models/digits/ready"} {
			if code, _, body := do(t, http.MethodGet, base+path, nil, nil); code != http.StatusOK {
				t.Errorf("GET %s = %d %s, want 200", path, code, body)
			}
		}
	})

	t.Run("server metadata lists extensions", func(t *testing.T) {
		code, _, body := do(t, http.MethodGet, base+"/v2", nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET /v2 = %d %s", code, body)
		}
		var md struct {
			Name       string   `json:"name"`
			Extensions []string `json:"extensions"`
		}
		if err := json.Unmarshal(body, &md); err != nil {
			t.Fatal(err)
		}
		for _, ext := range []string{"model_repository", "model_configuration", "statistics", "binary_tensor_data"} {
			if !slices.Contains(md.Extensions, ext) {
				t.Errorf("extensions %v lack %q", md.Extensions, ext)
			}
		}
	})

	t.Run("simple json sums and differences", func(t *testing.T) {
		in0, in1 := simpleInputs(t)
		code, _, body := do(t, http.MethodPost, base+"/v2/models/simple/infer", readFile(t, "examples/requests/simple.json"), nil)
		if code != http.StatusOK {
			t.Fatalf("infer = %d %s", code, body)
		}
		r := decodeV2(t, body)
		checkSimple(t, in0, in1, func(name string) []float64 {
			for _, o := range r.Outputs {
				if o.Name == name {
					if o.Datatype != "INT32" || len(o.Shape) != 2 || o.Shape[1] != 16 {
						t.Errorf("output %s: datatype %s shape %v, want INT32 [1,16]", name, o.Datatype, o.Shape)
					}
					return o.Data
				}
			}
			t.Fatalf("no output %s in %s", name, body)
			return nil
		})
	})

	t.Run("simple binary extension", func(t *testing.T) {
		in0, in1 := simpleInputs(t)
		hl := strings.TrimSpace(string(readFile(t, "examples/requests/simple.bin.header-length")))
		code, hdr, body := do(t, http.MethodPost, base+"/v2/models/simple/infer", readFile(t, "examples/requests/simple.bin"),
			map[string]string{"Inference-Header-Content-Length": hl, "Content-Type": "application/octet-stream"})
		if code != http.StatusOK {
			t.Fatalf("infer = %d %s", code, body)
		}
		n, err := parseInt(hdr.Get("Inference-Header-Content-Length"))
		if err != nil || n > len(body) {
			t.Fatalf("response Inference-Header-Content-Length %q invalid for body of %d bytes", hdr.Get("Inference-Header-Content-Length"), len(body))
		}
		r := decodeV2(t, body[:n])
		raw := body[n:]
		outs := map[string][]float64{}
		for _, o := range r.Outputs {
			size := int(o.Parameters["binary_data_size"].(float64))
			vals := make([]float64, size/4)
			for i := range vals {
				vals[i] = float64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
			}
			outs[o.Name] = vals
			raw = raw[size:]
		}
		if len(raw) != 0 {
			t.Errorf("%d trailing bytes after the binary outputs", len(raw))
		}
		checkSimple(t, in0, in1, func(name string) []float64 { return outs[name] })
	})

	t.Run("metrics pass promtool", func(t *testing.T) {
		code, _, body := do(t, http.MethodGet, "http://"+s.metrics+"/metrics", nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET /metrics = %d", code)
		}
		text := string(body)
		for _, want := range []string{
			`sluice_model_inference_requests_total{model="simple",version="1"}`,
			`sluice_model_request_duration_seconds_bucket{model="simple",version="1"`,
			`sluice_model_load_duration_seconds{model="parcel_eta",version="2"}`,
			`sluice_model_state{model="digits",state="READY",version="1"} 1`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Fatal("promtool not found: run `make deps` (installs Debian's prometheus package)")
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(string(withoutTritonNames([]byte(text)))) // nv_*: see withoutTritonNames
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})
}

func checkSimple(t *testing.T, in0, in1 []float64, output func(string) []float64) {
	t.Helper()
	sum, diff := output("OUTPUT0"), output("OUTPUT1")
	if len(sum) != 16 || len(diff) != 16 {
		t.Fatalf("OUTPUT0/OUTPUT1 have %d/%d values, want 16", len(sum), len(diff))
	}
	for i := range 16 {
		if sum[i] != in0[i]+in1[i] || diff[i] != in0[i]-in1[i] {
			t.Fatalf("element %d: got sum %v diff %v, want %v and %v", i, sum[i], diff[i], in0[i]+in1[i], in0[i]-in1[i])
		}
	}
}

func parseInt(s string) (int, error) {
	var n int
	_, err := fmt.Sscan(s, &n)
	return n, err
}

func maxAbsDiff(a, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}
