package modelrepo

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The GCS emulator's pubsub dependency starts a worker at init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
