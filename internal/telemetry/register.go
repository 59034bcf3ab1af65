package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns it, or returns the collector
// already registered under the same descriptor, so that several instances
// of a component (one per backend, per service, per store) can share one
// registerer and one set of series told apart by labels. A nil reg leaves
// c unregistered. A different collector under the same name is a wiring
// bug and panics.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic("telemetry: register metric: " + err.Error())
}
