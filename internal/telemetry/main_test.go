package telemetry

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running
// (a span exporter or sampler not shut down).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
