package libtorch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-ml/sluice/internal/backend"
)

// A server without the shim library runs TorchScript models on the
// Python worker and says why, once at start-up and at each load.
func TestMissingLibraryFallsBack(t *testing.T) {
	dir := t.TempDir()
	notALibrary := filepath.Join(dir, "libsluice_torch.so")
	if err := os.WriteFile(notALibrary, []byte("not an ELF file"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Without cgo an existing library cannot be opened either: the reason
	// says so.
	openFails := notALibrary
	if !cgoBuild {
		openFails = "CGO_ENABLED=0"
	}
	for _, tt := range []struct {
		name, path, why string
	}{
		{"missing", filepath.Join(dir, "nowhere", "libsluice_torch.so"), "build-torch-shim.sh"},
		{"not a library", notALibrary, openFails},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logger, logs := testLogger()
			fb := &fakeFallback{}
			b := New(Options{LibraryPath: tt.path}, fb, logger)
			ok, why := b.InProcess()
			if ok || !strings.Contains(why, tt.why) {
				t.Fatalf("InProcess() = %v, %q; want false and a reason naming %s", ok, why, tt.why)
			}
			if !strings.Contains(logs.String(), "run in the Python worker") {
				t.Errorf("start-up log does not say where TorchScript models run:\n%s", logs)
			}
			model := writeModelDir(t, "m", "model.pt")
			cfg := testConfig(t, "m", oneInputConfig)
			in, err := b.Load(t.Context(), backend.LoadOptions{Model: "m", Version: 1, Path: model, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			if _, isFake := in.(fakeInstance); !isFake || len(fb.loaded()) != 1 {
				t.Fatalf("Load gave %T, fallback loads %v; want the fallback's instance", in, fb.loaded())
			}
			if !strings.Contains(logs.String(), "engine=python-worker") {
				t.Errorf("load log does not name the engine:\n%s", logs)
			}
		})
	}
}

func TestFindLibrary(t *testing.T) {
	t.Setenv(LibraryEnv, "")
	t.Setenv(DirEnv, t.TempDir())
	if _, err := FindLibrary(""); err == nil || !strings.Contains(err.Error(), "scripts/build-torch-shim.sh") {
		t.Fatalf("FindLibrary in an empty folder = %v, want an error naming the build script", err)
	}
	lib := filepath.Join(t.TempDir(), "x.so")
	if err := os.WriteFile(lib, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(LibraryEnv, lib)
	if got, err := FindLibrary(""); err != nil || got != lib {
		t.Fatalf("FindLibrary with %s set = %q, %v", LibraryEnv, got, err)
	}
	if _, err := FindLibrary(filepath.Join(t.TempDir(), "gone.so")); err == nil {
		t.Fatal("an explicit path that does not exist must be an error, not a reason to keep looking")
	}
}

func TestTensorResult(t *testing.T) {
	for typ, want := range map[string]bool{
		"Tensor":                  true,
		"(Tensor, Tensor)":        true,
		"Tensor[]":                true,
		"List[Tensor]":            true,
		"Tuple[Tensor, Tensor]":   true,
		"Dict(str, Tensor)":       false,
		"str[]":                   false,
		"(Tensor, int)":           false,
		"Optional[Tensor]":        false,
		"Dict[str, List[Tensor]]": false,
	} {
		if got := tensorResult(typ); got != want {
			t.Errorf("tensorResult(%q) = %v, want %v", typ, got, want)
		}
	}
}

const oneInputConfig = `
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 2 ] } ]
`

// writeModelDir makes <tmp>/<name>/1/<file> (empty) and returns its path.
func writeModelDir(t *testing.T, name, file string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name, "1")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// BundledBLAS names blas/ beside the shim when it holds libblas.so.3
// (scripts/build-torch-shim.sh unpacks OpenBLAS there), and nothing when
// the shim uses the machine's BLAS.
func TestBundledBLAS(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libsluice_torch.so")
	if got := BundledBLAS(lib); got != "" {
		t.Errorf("without blas/: %q, want \"\"", got)
	}
	if err := os.MkdirAll(filepath.Join(dir, "blas"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := BundledBLAS(lib); got != "" {
		t.Errorf("with an empty blas/: %q, want \"\"", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "blas", "libblas.so.3"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := BundledBLAS(lib), filepath.Join(dir, "blas"); got != want {
		t.Errorf("BundledBLAS = %q, want %q", got, want)
	}
	if got := BundledBLAS(""); got != "" {
		t.Errorf("no library: %q, want \"\"", got)
	}
}
