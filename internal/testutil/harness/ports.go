package harness

import (
	"encoding/json"
	"fmt"
	"os"
)

// ReadPortsFile reads what a sluice process wrote to --ports-file once
// its listeners were bound: listener name (models_http, models_grpc,
// models_metrics, features, ...) → bound host:port. Before the process
// writes it the error wraps fs.ErrNotExist; the file appears whole, so
// any other error is real.
func ReadPortsFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Listeners []struct {
			Name    string `json:"name"`
			Address string `json:"address"`
		} `json:"listeners"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("ports file %s: %w", path, err)
	}
	out := make(map[string]string, len(f.Listeners))
	for _, l := range f.Listeners {
		out[l.Name] = l.Address
	}
	return out, nil
}
