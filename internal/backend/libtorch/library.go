package libtorch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	var candidate string
	switch {
	case flagPath != "":
		candidate = flagPath
	case os.Getenv(LibraryEnv) != "":
		candidate = os.Getenv(LibraryEnv)
	default:
		dir, err := defaultDir()
		if err != nil {
			return "", notFound(err.Error())
		}
		candidate = filepath.Join(dir, libraryFile)
	}
	st, err := os.Stat(candidate) //nolint:gosec // G703: the operator chooses this path (flag or environment) on purpose
	if err != nil || !st.Mode().IsRegular() {
		return "", notFound(candidate)
	}
	return candidate, nil
}

// DefaultDir is the folder scripts/build-torch-shim.sh builds into.
func defaultDir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return d, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no cache folder: %w", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "sluice", "libtorch-shim"), nil
}

func notFound(where string) error {
	where = strings.NewReplacer("\n", " ", "\r", " ").Replace(where)
	return fmt.Errorf("%s not found (looked in %s): run scripts/build-torch-shim.sh (needs libtorch-dev) or set %s", libraryFile, where, LibraryEnv)
}
