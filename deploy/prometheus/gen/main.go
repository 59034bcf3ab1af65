// Command gen writes deploy/prometheus/sluice-prometheusrule.yaml from
// deploy/prometheus/sluice-rules.yml. Run it with
// "go generate ./deploy/prometheus" (it writes into the current folder).
package main

import (
	"fmt"
	"os"

	"github.com/sluice-ml/sluice/deploy/prometheus"
)

func main() {
	out, err := prometheus.Manifest(prometheus.Rules)
	if err == nil {
		err = os.WriteFile(prometheus.ManifestFile, out, 0o644) //nolint:gosec // a committed, world-readable manifest
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
