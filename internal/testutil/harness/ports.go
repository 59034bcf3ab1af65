package harness

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
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

// NATSPort reads the client port a nats-server process bound from the
// ports file it writes with --ports_file_dir dir (<binary>_<pid>.ports,
// JSON with the client URLs); start it with -p -1 to let it pick a free
// one. Before the server writes the file, or while it is still partial,
// it returns an error: poll until it does not.
func NATSPort(dir, bin string, pid int) (int, error) {
	path := filepath.Join(dir, filepath.Base(bin)+"_"+strconv.Itoa(pid)+".ports")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("ports file: %w", err)
	}
	var ports struct {
		Nats []string `json:"nats"`
	}
	if err := json.Unmarshal(b, &ports); err != nil || len(ports.Nats) == 0 {
		return 0, fmt.Errorf("ports file %s: %q: %w", path, b, err)
	}
	u, err := url.Parse(ports.Nats[0])
	if err != nil {
		return 0, fmt.Errorf("ports file %s: %w", path, err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("ports file %s: no port in %q", path, ports.Nats[0])
	}
	return p, nil
}
