package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
)

// registerPortsFile adds --ports-file, the same on every serving command.
func registerPortsFile(fl *pflag.FlagSet, path *string) {
	fl.StringVar(path, "ports-file", "", `once every listener is bound, write their addresses to this file as JSON ({"listeners":[{"name":"models_http","address":"127.0.0.1:8000",...}]}); removed at exit. With a port of 0 the system picks a free one and this file says which`)
}

// portsFile is what --ports-file holds: the banner's listener table.
type portsFile struct {
	Listeners []listenerInfo `json:"listeners"`
}

// writePortsFile writes the listeners bound so far to path (nothing when
// path is empty) and returns the function that removes it. The file
// appears whole: it is written beside path and renamed, so a reader that
// polls for it never sees a part.
func (g *guard) writePortsFile(path string) (remove func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	b, err := json.MarshalIndent(portsFile{Listeners: g.Listeners()}, "", "  ")
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("write --ports-file: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return nil, fmt.Errorf("write --ports-file: %w", err)
	}
	return func() { _ = os.Remove(path) }, nil
}
