package onnxruntime

import (
	"errors"

	"github.com/sluice-ml/sluice/internal/backend"
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
func FindLibrary(flagPath string) (string, error) { return search.Find(flagPath) }

var search = backend.LibrarySearch{
	What:       "onnxruntime library",
	File:       libraryFile,
	LibraryEnv: LibraryEnv,
	DirEnv:     DirEnv,
	CacheDir:   "onnxruntime-" + RuntimeVersion,
	Fix:        "scripts/install-onnxruntime.sh",
}

func notFound(where string) error { return search.NotFound(where) }
