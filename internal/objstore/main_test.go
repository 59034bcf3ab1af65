package objstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The GCS emulator (objstoretest runs fake-gcs-server in-process) pulls
	// in pubsub, whose opencensus dependency starts a worker at init that
	// lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
