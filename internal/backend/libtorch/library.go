package libtorch

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/sluice-ml/sluice/internal/backend"
)

// Environment variables FindLibrary reads.
const (
	// LibraryEnv names libsluice_torch.so itself.
	LibraryEnv = "SLUICE_TORCH_LIB"
	// DirEnv overrides the folder scripts/build-torch-shim.sh builds into.
	DirEnv = "SLUICE_TORCH_DIR"
)

// libraryFile is the shim's file name inside its folder.
const libraryFile = "libsluice_torch.so"

// ErrNotBuiltIn is the fallback reason of a binary built without cgo.
var ErrNotBuiltIn = errors.New("this binary was built with CGO_ENABLED=0, which cannot open libtorch")

// FindLibrary returns the shim library to open. It tries, in order:
// flagPath (--backend-config=pytorch,library=PATH), the SLUICE_TORCH_LIB
// environment variable, and the folder scripts/build-torch-shim.sh builds
// into: $SLUICE_TORCH_DIR, else
// ${XDG_CACHE_HOME:-~/.cache}/sluice/libtorch-shim. The first source that
// is set decides. The error is one line that names the build script.
func FindLibrary(flagPath string) (string, error) {
	return backend.LibrarySearch{
		What:       libraryFile,
		File:       libraryFile,
		LibraryEnv: LibraryEnv,
		DirEnv:     DirEnv,
		CacheDir:   "libtorch-shim",
		Fix:        "scripts/build-torch-shim.sh (needs libtorch-dev)",
	}.Find(flagPath)
}

// BundledBLAS returns the folder of the BLAS the shim at lib was linked
// with, blas/ beside it, where scripts/build-torch-shim.sh unpacks Debian's
// single-threaded OpenBLAS; "" when the shim uses the machine's
// libblas.so.3 (SLUICE_TORCH_BLAS=system, or no package to fetch). The
// Python worker's PyTorch models get the same folder first on their
// LD_LIBRARY_PATH, so that both engines compute with one BLAS.
func BundledBLAS(lib string) string {
	if lib == "" {
		return ""
	}
	dir := filepath.Join(filepath.Dir(lib), "blas")
	if _, err := os.Stat(filepath.Join(dir, "libblas.so.3")); err != nil {
		return ""
	}
	return dir
}
