package telemetry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterReusesTheRegisteredCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "sluice_test_total", Help: "test"}
	first := Register(reg, prometheus.NewCounterVec(opts, []string{"k"}))
	second := Register(reg, prometheus.NewCounterVec(opts, []string{"k"}))
	if first != second {
		t.Fatal("second Register returned a new collector instead of the registered one")
	}
	if got := Register(nil, prometheus.NewCounter(opts)); got == nil {
		t.Fatal("nil registerer must return the collector unregistered")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a different collector under the same name must panic")
		}
	}()
	Register(reg, prometheus.NewCounterVec(opts, []string{"x"})) // same name, other labels
}
