package integration_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// osUpload copies examples/models/<model> (the given version folders, or
// all) into the bucket under prefix, one object per file.
func osUpload(t *testing.T, b *objstore.Bucket, prefix, model string, versions ...string) {
	t.Helper()
	src := filepath.Join(repoDir, "examples/models", model)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		rel = filepath.ToSlash(rel)
		if first, _, nested := strings.Cut(rel, "/"); nested && len(versions) > 0 && !contains(versions, first) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return b.WriteAll(t.Context(), prefix+"/"+model+"/"+rel, data)
	})
	if err != nil {
		t.Fatalf("upload %s: %v", model, err)
	}
}

func contains(xs []string, x string) bool {
	return slices.Contains(xs, x)
}

// osNoSecrets fails when any credential value appears in text.
func osNoSecrets(t *testing.T, srv *objstoretest.Server, where, text string) {
	t.Helper()
	for _, s := range srv.Secrets {
		if strings.Contains(text, s) {
			t.Errorf("a credential value appears in %s", where)
		}
	}
}

// osInferParcel sends the parcel_eta reference request and returns the
// answering version, checking the outputs against that version's
// reference.
func osInferParcel(t *testing.T, base string) (int, string) {
	t.Helper()
	_, body := loadReference(t, "2")
	code, _, out := do(t, http.MethodPost, base+"/v2/models/parcel_eta/infer", body, nil)
	if code != http.StatusOK {
		return code, string(out)
	}
	r := decodeV2(t, out)
	ref, _ := loadReference(t, r.ModelVersion)
	if d := matchReference(t, ref, r); d > 1e-5 {
		t.Fatalf("version %s answered %g away from its reference", r.ModelVersion, d)
	}
	return code, r.ModelVersion
}

// TestBucketRepositories serves a model repository from each store
// (S3-compatible, GCS emulator, Azurite): tritonclient-style load, infer
// and unload over KServe v2 HTTP, `sluice repo check` on the bucket, an
// ensemble and a PyTorch model from a bucket, and no credential value in
// any log line or error body.
func TestBucketRepositories(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		start func(testing.TB) *objstoretest.Server
		extra []string // more example models in the bucket
	}{
		{"s3", objstoretest.StartS3, []string{"digits", "digits_preprocess", "digits_pipeline"}},
		{"gcs", objstoretest.StartGCS, []string{"parcel_eta_torch"}},
		{"azure", objstoretest.StartAzurite, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := tt.start(t)
			b := srv.Open(t, "")
			osUpload(t, b, "models", "parcel_eta")
			for _, m := range tt.extra {
				osUpload(t, b, "models", m)
			}
			uri := srv.URI("models")

			// repo check reads the bucket.
			check := exec.Command(binPath, "repo", "check", uri, "--backend-config", "onnxruntime,library="+ortLib)
			check.Env = append(os.Environ(), srv.Env...)
			out, err := check.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ok: no problems found") {
				t.Fatalf("repo check %s: %v\n%s", uri, err, out)
			}
			osNoSecrets(t, srv, "repo check output", string(out))

			s := startServerEnv(t, srv.Env, "serve", "--model-repository", uri, "--model-control-mode", "explicit",
				"--repository-cache-dir", t.TempDir(), "--strict-readiness=false")
			base := "http://" + s.http
			idx := repoIndex(t, base)
			if len(idx) != 1+len(tt.extra) {
				t.Fatalf("index of %s: %+v", uri, idx)
			}
			if code, _, body := do(t, http.MethodPost, base+"/v2/repository/models/parcel_eta/load", nil, nil); code != http.StatusOK {
				t.Fatalf("load = %d %s\nlogs:\n%s", code, body, s.logs)
			}
			if code, v := osInferParcel(t, base); code != http.StatusOK || v != "2" {
				t.Fatalf("infer = %d %s, want version 2", code, v)
			}
			if code, _, body := do(t, http.MethodPost, base+"/v2/repository/models/parcel_eta/unload", nil, nil); code != http.StatusOK {
				t.Fatalf("unload = %d %s", code, body)
			}
			code, _, body := do(t, http.MethodPost, base+"/v2/models/parcel_eta/infer", []byte(`{"inputs":[]}`), nil)
			if code == http.StatusOK {
				t.Fatalf("infer after unload = %d %s", code, body)
			}
			osNoSecrets(t, srv, "an error body", string(body))
			code, _, body = do(t, http.MethodPost, base+"/v2/repository/models/no_such_model/load", nil, nil)
			if code == http.StatusOK {
				t.Fatalf("load of a missing model = %d", code)
			}
			osNoSecrets(t, srv, "an error body", string(body))

			switch tt.name {
			case "s3":
				// An ensemble loads its step models from the bucket.
				if code, _, body := do(t, http.MethodPost, base+"/v2/repository/models/digits_pipeline/load", nil, nil); code != http.StatusOK {
					t.Fatalf("load ensemble = %d %s", code, body)
				}
				code, _, body := do(t, http.MethodPost, base+"/v2/models/digits_pipeline/infer", readFile(t, "examples/requests/digits_pipeline.json"), nil)
				if code != http.StatusOK {
					t.Fatalf("ensemble infer = %d %s", code, body)
				}
			case "gcs":
				// A PyTorch state_dict model (Python worker) from a bucket.
				if code, _, body := do(t, http.MethodPost, base+"/v2/repository/models/parcel_eta_torch/load", nil, nil); code != http.StatusOK {
					t.Fatalf("load pytorch = %d %s\nlogs:\n%s", code, body, s.logs)
				}
				_, req := loadReference(t, "2")
				code, _, body := do(t, http.MethodPost, base+"/v2/models/parcel_eta_torch/infer", req, nil)
				if code != http.StatusOK {
					t.Fatalf("pytorch infer = %d %s", code, body)
				}
			}
			s.stop(t)
			osNoSecrets(t, srv, "the server's log", s.logs.String())
		})
	}
}

// TestBucketReloadUnderLoad serves parcel_eta from an S3 bucket in poll
// mode while about 300 requests/s arrive. Version 2 is uploaded file by
// file, its model file last, across polls: it must not load until it is
// whole, then serve within a poll interval plus download and settle time.
// A version 3 whose model file does not match its SHA256SUMS is refused
// with version 2 still serving. No request fails.
func TestBucketReloadUnderLoad(t *testing.T) {
	t.Parallel()
	srv := objstoretest.StartS3(t)
	b := srv.Open(t, "")
	osUpload(t, b, "models", "parcel_eta", "1")
	s := startServerEnv(t, srv.Env, "serve", "--model-repository", srv.URI("models"), "--model-control-mode", "poll",
		"--repository-poll-secs", "1", "--repository-cache-dir", t.TempDir())
	base := "http://" + s.http
	if code, v := osInferParcel(t, base); code != http.StatusOK || v != "1" {
		t.Fatalf("infer = %d %s", code, v)
	}

	load := osLoad(t, base, 300)
	// Version 2, one object at a time, 400 ms apart: polls run in between.
	v2 := filepath.Join(repoDir, "examples/models/parcel_eta/2")
	for _, f := range []string{"SHA256SUMS", "model_config.json", "model.onnx"} {
		data, err := os.ReadFile(filepath.Join(v2, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.WriteAll(t.Context(), "models/parcel_eta/2/"+f, data); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
	}
	took := harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "version 2 serving after its upload", func() (bool, string) {
		return load.version("2") > 0, fmt.Sprintf("index %+v\nlogs:\n%s", repoIndex(t, base), s.logs)
	})
	t.Logf("version 2 serving %v after its last object was uploaded (poll interval 1s)", took.Round(10*time.Millisecond))
	if strings.Contains(s.logs.String(), "SHA256SUMS") {
		t.Fatalf("a half-uploaded version 2 was loaded and failed verification:\n%s", s.logs)
	}

	// Version 3: its model file does not match its manifest.
	sums, _ := os.ReadFile(filepath.Join(v2, "SHA256SUMS"))
	v1model, _ := os.ReadFile(filepath.Join(repoDir, "examples/models/parcel_eta/1/model.onnx"))
	if err := b.WriteAll(t.Context(), "models/parcel_eta/3/SHA256SUMS", sums); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteAll(t.Context(), "models/parcel_eta/3/model.onnx", v1model); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, 100*time.Millisecond, "version 3 refused", func() (bool, string) {
		index := repoIndex(t, base)
		for _, e := range index {
			if e.Name == "parcel_eta" && strings.Contains(e.Reason, "SHA256SUMS") {
				t.Logf("version 3 refused: %s", e.Reason)
				return true, ""
			}
		}
		return false, fmt.Sprintf("index %+v", index)
	})
	time.Sleep(500 * time.Millisecond)
	n, failed, first, counts := load.stop()
	t.Logf("%d requests, %d failed, answers by version %v", n, failed, counts)
	if failed != 0 {
		t.Fatalf("%d requests failed; first: %s", failed, first)
	}
	if counts["3"] != 0 {
		t.Fatalf("the refused version 3 answered %d requests", counts["3"])
	}
	if code, v := osInferParcel(t, base); code != http.StatusOK || v != "2" {
		t.Fatalf("after the refused version: %d %s, want version 2", code, v)
	}
	osNoSecrets(t, srv, "the server's log", s.logs.String())
}

// TestBucketOutage kills the S3 server for 30 s while the chain serves
// parcel_eta from it under load: no inference fails, readiness holds,
// `sluice status` and the index say the repository is stale, and polling
// resumes after. /config_dump and every log line are free of credentials.
func TestBucketOutage(t *testing.T) {
	t.Parallel()
	srv := objstoretest.StartS3(t)
	b := srv.Open(t, "")
	osUpload(t, b, "models", "parcel_eta") // the example's service runs version 2
	c := conStartExampleWith(t, "examples/parcel-eta/sluice.yaml", srv.URI("models"), map[string]any{
		"control_mode": "poll", "repository_poll_interval": "1s", "repository_cache_dir": t.TempDir(),
	}, srv.Env)
	base := "http://" + c.models
	load := osLoad(t, base, 100)
	time.Sleep(2 * time.Second)

	srv.Stop()
	down := time.Now()
	var status string
	for time.Since(down) < 30*time.Second {
		time.Sleep(time.Second)
		if strings.Contains(status, "stale") {
			continue
		}
		// The first failed poll takes the SDK's retries; ask until it shows.
		out, _ := exec.Command(binPath, "status", "--admin", "http://"+c.admin).CombinedOutput()
		status = string(out)
		if !strings.Contains(status, "stale") {
			continue
		}
		t.Logf("status says stale %v into the outage", time.Since(down).Round(100*time.Millisecond))
		code, _, _ := do(t, http.MethodGet, base+"/v2/health/ready", nil, nil)
		if code != http.StatusOK {
			t.Errorf("ready = %d during the outage, want 200", code)
		}
		_, _, metrics := do(t, http.MethodGet, "http://"+c.modelsMetrics+"/metrics", nil, nil)
		if !strings.Contains(string(metrics), `sluice_model_repository_up{repository="`+srv.URI("models")+`"} 0`) {
			t.Errorf("sluice_model_repository_up is not 0 during the outage")
		}
	}
	if !strings.Contains(status, "stale") {
		t.Errorf("sluice status never said stale during the 30 s outage; last:\n%s", status)
	}
	srv.Start(t)
	t.Logf("status during the outage:\n%s", status)

	// Polling resumes: a new version (version 2's files as version 3)
	// uploaded after the outage serves.
	v2 := filepath.Join(repoDir, "examples/models/parcel_eta/2")
	for _, f := range []string{"SHA256SUMS", "model_config.json", "model.onnx"} {
		data, err := os.ReadFile(filepath.Join(v2, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.WriteAll(t.Context(), "models/parcel_eta/3/"+f, data); err != nil {
			t.Fatal(err)
		}
	}
	took := harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, "polling resumed: version 3 serving", func() (bool, string) {
		return load.version("3") > 0, fmt.Sprintf("index %+v", repoIndex(t, base))
	})
	t.Logf("version 3 serving %v after its upload, once the store came back", took.Round(10*time.Millisecond))
	for _, e := range repoIndex(t, base) {
		if strings.Contains(e.Reason, "unreachable") {
			t.Errorf("index still says unreachable after the outage: %+v", e)
		}
	}
	n, failed, first, counts := load.stop()
	t.Logf("%d requests, %d failed, answers by version %v", n, failed, counts)
	if failed != 0 {
		t.Fatalf("%d inferences failed; first: %s", failed, first)
	}

	code, _, dump := do(t, http.MethodGet, "http://"+c.admin+"/config_dump", nil, nil)
	if code != http.StatusOK {
		t.Errorf("/config_dump = %d", code)
	}
	osNoSecrets(t, srv, "/config_dump", string(dump))
	osNoSecrets(t, srv, "sluice status", status)
	osNoSecrets(t, srv, "the server's log", c.logs.String())
}

// osLoadGen sends parcel_eta requests at a fixed rate until stopped.
type osLoadGen struct {
	stopped  atomic.Bool
	wg       sync.WaitGroup
	n        atomic.Int64
	failed   atomic.Int64
	first    atomic.Value
	mu       sync.Mutex // protects versions
	versions map[string]int
}

// osLoad starts rate requests/s of parcel_eta (at most 2 minutes).
func osLoad(t *testing.T, base string, rate int) *osLoadGen {
	t.Helper()
	_, body := loadReference(t, "2")
	refs := map[string]reference{}
	for _, v := range []string{"1", "2"} {
		refs[v], _ = loadReference(t, v)
	}
	refs["3"] = refs["2"] // TestBucketOutage's version 3 is version 2's files
	g := &osLoadGen{versions: map[string]int{}}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(client.CloseIdleConnections)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	deadline := time.Now().Add(2 * time.Minute)
	g.wg.Go(func() {
		defer tick.Stop()
		for range tick.C {
			if g.stopped.Load() || time.Now().After(deadline) {
				return
			}
			g.wg.Go(func() {
				g.n.Add(1)
				fail := func(why string) {
					g.failed.Add(1)
					g.first.CompareAndSwap(nil, why)
				}
				resp, err := client.Post(base+"/v2/models/parcel_eta/infer", "application/json", strings.NewReader(string(body)))
				if err != nil {
					fail(err.Error())
					return
				}
				var r v2Response
				err = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					fail(fmt.Sprintf("status %d, decode %v", resp.StatusCode, err))
					return
				}
				if ref, ok := refs[r.ModelVersion]; !ok || matchReference(t, ref, r) > 1e-5 {
					fail("answer of version " + r.ModelVersion + " does not match its reference")
					return
				}
				g.mu.Lock()
				g.versions[r.ModelVersion]++
				g.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() { g.stop() })
	return g
}

// version returns how many answers came from version v so far.
func (g *osLoadGen) version(v string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.versions[v]
}

// stop ends the load and returns requests sent, failed, the first
// failure and answers by version.
func (g *osLoadGen) stop() (int64, int64, string, map[string]int) {
	g.stopped.Store(true)
	g.wg.Wait()
	first, _ := g.first.Load().(string)
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	maps.Copy(out, g.versions)
	return g.n.Load(), g.failed.Load(), first, out
}
