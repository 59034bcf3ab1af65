package modelrepo

import (
	"fmt"
	"strings"

	"github.com/sluice-ml/sluice/internal/backend"
)

// healthReporters returns the instances that can stop serving after they
// loaded (out-of-process workers).
func healthReporters(instances []backend.Instance) []backend.HealthReporter {
	var out []backend.HealthReporter
	for _, in := range instances {
		if hr, ok := in.(backend.HealthReporter); ok {
			out = append(out, hr)
		}
	}
	return out
}

// instanceHealth says which of a serving version's instances are down and
// why ("" when none is), and whether all of them are.
func (lv *loaded) instanceHealth() (reason string, allDown bool) {
	var reasons []string
	for _, hr := range lv.health {
		if r := hr.Unhealthy(); r != "" {
			reasons = append(reasons, r)
		}
	}
	if len(reasons) == 0 {
		return "", false
	}
	// lv.instances is not read here: a retired version's are cleared
	// while the index may still look at it.
	n := len(lv.health)
	return fmt.Sprintf("%d of %d instances down: %s", len(reasons), n, strings.Join(reasons, "; ")), len(reasons) == n
}
