package libtorch

import (
	"errors"

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
