//go:build cgo

package libtorch

import (
	"path/filepath"
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// BenchmarkExecute runs the example TorchScript model in-process on one
// request of 2 rows, as examples/requests/parcel_eta.json sends.
func BenchmarkExecute(b *testing.B) {
	logger, _ := testLogger()
	bk := New(Options{}, &fakeFallback{}, logger)
	if ok, why := bk.InProcess(); !ok {
		b.Fatal(why)
	}
	dir := filepath.Join(examples, "parcel_eta_ts")
	cfg := benchConfig(b, dir)
	in, _, err := bk.loadInProcess(filepath.Join(dir, "1", "model.pt"), benchLoadOptions(cfg))
	if err != nil || in == nil {
		b.Fatal(err)
	}
	defer in.Close()
	inputs := []infer.Tensor{
		ramp("user_features", infer.Shape{2, 128}, -1, 0.02),
		ramp("package_features", infer.Shape{2, 64}, 0.5, -0.01),
		ramp("route_features", infer.Shape{2, 32}, 2, 0.03),
	}
	outs := []string{"eta_prediction", "confidence_score"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Execute(b.Context(), inputs, outs); err != nil {
			b.Fatal(err)
		}
	}
}
