package modelconfig

import (
	"fmt"
	"slices"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// batchInputsOutputs checks batch_input and batch_output as Triton does:
// batch inputs need max_batch_size > 0, a known kind, at least one target
// (a name no listed input has), data type TYPE_INT32 or TYPE_FP32 and
// exactly one source input that the config lists; batch outputs name
// listed outputs and one listed source input.
func (v *validator) batchInputsOutputs() {
	bis, bos := v.cfg.GetBatchInput(), v.cfg.GetBatchOutput()
	if len(bis)+len(bos) > 0 && v.cfg.GetMaxBatchSize() <= 0 {
		v.add("max_batch_size", "batch_input and batch_output need max_batch_size > 0, got %d", v.cfg.GetMaxBatchSize())
	}
	inputs := map[string]bool{}
	for _, in := range v.cfg.GetInput() {
		inputs[in.GetName()] = true
	}
	outputs := map[string]bool{}
	for _, out := range v.cfg.GetOutput() {
		outputs[out.GetName()] = true
	}
	for i, bi := range bis {
		path := fmt.Sprintf("batch_input[%d]", i)
		if _, ok := inferencepb.BatchInput_Kind_name[int32(bi.GetKind())]; !ok {
			v.add(path+".kind", "batch_input[%d]: unknown kind %d", i, bi.GetKind())
		}
		if len(bi.GetTargetName()) == 0 {
			v.add(path, "batch_input[%d]: target_name must be set", i)
		}
		for _, t := range bi.GetTargetName() {
			if inputs[t] {
				v.add(path+".target_name", "batch_input[%d]: target '%s' is also listed as an input; the server computes it, clients do not send it", i, t)
			}
		}
		if dt := bi.GetDataType(); dt != inferencepb.DataType_TYPE_INT32 && dt != inferencepb.DataType_TYPE_FP32 {
			v.add(path+".data_type", "batch_input[%d]: data_type must be TYPE_INT32 or TYPE_FP32, got %s", i, dt)
		}
		v.sourceInput(path, "batch_input", i, bi.GetSourceInput(), inputs)
	}
	for i, bo := range bos {
		path := fmt.Sprintf("batch_output[%d]", i)
		if len(bo.GetTargetName()) == 0 {
			v.add(path, "batch_output[%d]: target_name must be set", i)
		}
		for _, t := range bo.GetTargetName() {
			if !outputs[t] {
				v.add(path+".target_name", "batch_output[%d]: target '%s' is not a listed output", i, t)
			}
		}
		v.sourceInput(path, "batch_output", i, bo.GetSourceInput(), inputs)
	}
}

func (v *validator) sourceInput(path, what string, i int, src []string, inputs map[string]bool) {
	if len(src) != 1 {
		v.add(path+".source_input", "%s[%d]: needs exactly one source_input, got %d", what, i, len(src))
		return
	}
	if !inputs[src[0]] {
		v.add(path+".source_input", "%s[%d]: source input '%s' is not a listed input", what, i, src[0])
	}
}

// raggedInput checks an allow_ragged_batch input of a batching model:
// ONNX Runtime and Triton's other backends take such an input flattened,
// so the model's tensor has one dimension. A Python model gets each
// request as its own InferenceRequest, unflattened, so its tensor keeps
// the config's shape (Triton loads such models; issue 25 item 10). It
// reports whether it handled the input.
func (v *validator) raggedInput(i int, in *inferencepb.ModelInput, specs []infer.TensorSpec) bool {
	if !in.GetAllowRaggedBatch() || v.cfg.GetMaxBatchSize() <= 0 {
		return false
	}
	if v.cfg.GetBackend() == "python" {
		return true
	}
	v.flatTensor(fmt.Sprintf("input[%d]", i), "input", in.GetName(), in.GetDataType(), specs, "allow_ragged_batch")
	return true
}

// scatteredOutput checks an output that a batch_output splits: the
// model gives the requests' parts concatenated in one dimension.
func (v *validator) scatteredOutput(i int, out *inferencepb.ModelOutput, specs []infer.TensorSpec) bool {
	if v.cfg.GetMaxBatchSize() <= 0 || !slices.ContainsFunc(v.cfg.GetBatchOutput(), func(bo *inferencepb.BatchOutput) bool {
		return slices.Contains(bo.GetTargetName(), out.GetName())
	}) {
		return false
	}
	v.flatTensor(fmt.Sprintf("output[%d]", i), "output", out.GetName(), out.GetDataType(), specs, "batch_output")
	return true
}

func (v *validator) flatTensor(base, kind, name string, dt inferencepb.DataType, specs []infer.TensorSpec, why string) {
	spec, ok := findSpec(specs, name)
	if !ok {
		v.add(base+".name", "%s '%s': the model has no such %s", kind, name, kind)
		return
	}
	if ToInfer(dt) != spec.DataType {
		v.add(base+".data_type", "%s '%s': config data_type %s does not match the model's %s", kind, name, dt, FromInfer(spec.DataType))
	}
	if len(spec.Shape) != 1 {
		v.add(base, "%s '%s' has %s: the model takes it flattened, in one dimension, but its shape is %s", kind, name, why, spec.Shape)
	}
}

// batchInputSignature checks each batch input's targets against the
// model's inputs and data types.
func (v *validator) batchInputSignature(sig infer.Signature) {
	for i, bi := range v.cfg.GetBatchInput() {
		for _, t := range bi.GetTargetName() {
			v.sequenceTensor(fmt.Sprintf("batch_input[%d]", i), "batch input", t, bi.GetDataType(), sig.Inputs)
		}
	}
}
