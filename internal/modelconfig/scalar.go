package modelconfig

import (
	"slices"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// ScalarsAsOne accepts a scalar model tensor declared with dims [1], as
// Triton's backends do: a listed input or output without a reshape whose
// dims are [1] while the model's tensor has no dimension (besides the
// batch dimension when max_batch_size > 0) gets reshape { shape: [] }, so
// that requests of shape [1] (or [batch, 1]) reach the model as scalars
// (or [batch]) and answers come back as [1] (or [batch, 1]). Call it before
// ValidateSignature.
func ScalarsAsOne(cfg *inferencepb.ModelConfig, sig infer.Signature) {
	if cfg == nil {
		return
	}
	scalar := func(specs []infer.TensorSpec, name string) bool {
		spec, ok := findSpec(specs, name)
		if !ok {
			return false
		}
		if cfg.GetMaxBatchSize() > 0 {
			return len(spec.Shape) == 1 && spec.Shape[0] == -1
		}
		return len(spec.Shape) == 0
	}
	one := []int64{1}
	for _, in := range cfg.GetInput() {
		if in.GetReshape() == nil && slices.Equal(in.GetDims(), one) && scalar(sig.Inputs, in.GetName()) {
			in.Reshape = &inferencepb.ModelTensorReshape{Shape: []int64{}}
		}
	}
	for _, out := range cfg.GetOutput() {
		if out.GetReshape() == nil && slices.Equal(out.GetDims(), one) && scalar(sig.Outputs, out.GetName()) {
			out.Reshape = &inferencepb.ModelTensorReshape{Shape: []int64{}}
		}
	}
}
