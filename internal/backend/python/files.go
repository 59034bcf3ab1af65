package python

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// workerFiles are the worker's Python files: sluice_worker.py (the
// process's main), triton_python_backend_utils.py and the sluice_builtin
// package of built-in models. "all:" keeps __init__.py, which a plain
// directory pattern would leave out for its leading underscore.
//
//go:embed all:worker
var workerFiles embed.FS

// workerScript is the worker's main file inside the extracted folder.
const workerScript = "sluice_worker.py"

// extractWorker writes the embedded worker files into a new private
// folder (mode 0700, files 0600) and returns its path. Python imports
// them from there like any module, so tracebacks name real files and
// lines. Compiled caches are skipped; workers run with -B and write none.
func extractWorker() (dir string, err error) {
	dir, err = os.MkdirTemp("", "sluice-python-")
	if err != nil {
		return "", fmt.Errorf("create worker folder: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	err = fs.WalkDir(workerFiles, "worker", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, "worker"), "/")
		if d.IsDir() {
			if d.Name() == "__pycache__" {
				return fs.SkipDir
			}
			if rel == "" {
				return nil
			}
			return os.Mkdir(filepath.Join(dir, filepath.FromSlash(rel)), 0o700)
		}
		if path.Ext(p) != ".py" {
			return nil
		}
		data, err := workerFiles.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, filepath.FromSlash(rel)), data, 0o600)
	})
	if err != nil {
		return "", fmt.Errorf("extract worker files: %w", err)
	}
	return dir, nil
}
