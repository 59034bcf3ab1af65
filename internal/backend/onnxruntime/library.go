package onnxruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Platform is the Triton platform name of ONNX models.
const Platform = "onnxruntime_onnx"

// RuntimeVersion is the ONNX Runtime release that
// scripts/install-onnxruntime.sh installs and the default search path names.
const RuntimeVersion = "1.30.0"

// Environment variables FindLibrary reads.
const (
	// LibraryEnv names the library file itself.
	LibraryEnv = "SLUICE_ONNXRUNTIME_LIB"
	// DirEnv overrides the folder scripts/install-onnxruntime.sh installs
	// into; FindLibrary looks for libonnxruntime.so.1 there.
	DirEnv = "SLUICE_ORT_DIR"
)

// libraryFile is the file name inside the install folder.
const libraryFile = "libonnxruntime.so.1"

// ErrNotBuiltIn is returned by a binary built without cgo, which cannot
// call ONNX Runtime.
var ErrNotBuiltIn = errors.New("onnxruntime backend not built in: this binary was built with CGO_ENABLED=0")

// Options configure a Backend.
type Options struct {
	// LibraryPath is the path of libonnxruntime.so.1. When empty, New
	// calls FindLibrary("").
	LibraryPath string
}

// FindLibrary returns the ONNX Runtime shared library to load. It tries, in
// order: flagPath (from --backend-config=onnxruntime,library=PATH), the
// SLUICE_ONNXRUNTIME_LIB environment variable, and the folder that
// scripts/install-onnxruntime.sh installs into: $SLUICE_ORT_DIR, else
// ${XDG_CACHE_HOME:-~/.cache}/sluice/onnxruntime-1.30.0. The first source
// that is set decides: an explicit path that does not exist is an error, not
// a reason to keep looking. The error is one line that names the
// install script.
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

// defaultDir mirrors the install script's choice of folder.
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
	return filepath.Join(cache, "sluice", "onnxruntime-"+RuntimeVersion), nil
}

func notFound(where string) error {
	// One line, whatever the path holds.
	where = strings.NewReplacer("\n", " ", "\r", " ").Replace(where)
	return fmt.Errorf("onnxruntime library not found (looked in %s): run scripts/install-onnxruntime.sh or set %s", where, LibraryEnv)
}
