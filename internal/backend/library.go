package backend

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LibrarySearch says where a backend looks for the shared library it opens
// with dlopen, and what to tell the operator when it is not there.
type LibrarySearch struct {
	// What names the library in the error, e.g. "onnxruntime library".
	What string
	// File is the library's file name inside its folder.
	File string
	// LibraryEnv is the environment variable that names the file itself.
	LibraryEnv string
	// DirEnv is the environment variable that names its folder.
	DirEnv string
	// CacheDir is the folder under ${XDG_CACHE_HOME:-~/.cache}/sluice that
	// the install script writes to.
	CacheDir string
	// Fix is what to run, for the error, e.g. "scripts/install-onnxruntime.sh".
	Fix string
}

// Find returns the library to open. It tries, in order: flagPath (from
// --backend-config), the LibraryEnv variable, and File in DirEnv's folder,
// else in ${XDG_CACHE_HOME:-~/.cache}/sluice/CacheDir. The first source
// that is set decides: an explicit path that does not exist is an error,
// not a reason to keep looking. The error is one line that names Fix.
func (s LibrarySearch) Find(flagPath string) (string, error) {
	var candidate string
	switch {
	case flagPath != "":
		candidate = flagPath
	case os.Getenv(s.LibraryEnv) != "":
		candidate = os.Getenv(s.LibraryEnv)
	default:
		dir, err := s.dir()
		if err != nil {
			return "", s.NotFound(err.Error())
		}
		candidate = filepath.Join(dir, s.File)
	}
	st, err := os.Stat(candidate) //nolint:gosec // G703: the operator chooses this path (flag or environment) on purpose
	if err != nil || !st.Mode().IsRegular() {
		return "", s.NotFound(candidate)
	}
	return candidate, nil
}

// dir mirrors the install script's choice of folder.
func (s LibrarySearch) dir() (string, error) {
	if d := os.Getenv(s.DirEnv); d != "" {
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
	return filepath.Join(cache, "sluice", s.CacheDir), nil
}

// NotFound is Find's error for a library not found where; one line,
// whatever where holds.
func (s LibrarySearch) NotFound(where string) error {
	where = strings.NewReplacer("\n", " ", "\r", " ").Replace(where)
	return fmt.Errorf("%s not found (looked in %s): run %s or set %s", s.What, where, s.Fix, s.LibraryEnv)
}
