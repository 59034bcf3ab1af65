package modelconfig

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// DefaultMaxBatchSize is the max_batch_size AutoComplete picks for a model
// that can batch when the configuration gives none (Triton's
// --backend-config default-max-batch-size).
const DefaultMaxBatchSize = 4

// defaultSequenceIdle is the sequence batcher's idle timeout when the
// configuration gives none: one second.
const defaultSequenceIdle = 1_000_000

// ApplyDefaults fills the fields a configuration may leave out:
//   - name, from modelName (the model's folder) when empty;
//   - version_policy, latest { num_versions: 1 };
//   - instance_group, one KIND_CPU group; KIND_AUTO becomes KIND_CPU,
//     since Sluice has no GPU execution provider; in each group a count
//     of 0 becomes the backend's default (DefaultInstanceCount: 2 for
//     ONNX Runtime, 1 for the others, as Triton) once the configuration
//     names its backend or platform, and stays 0 until then (call
//     ApplyDefaults again after setting the backend); unnamed groups are
//     named "<model>_<i>". Ensembles get no instance groups: they run no
//     model themselves;
//   - sequence_batching, where set: max_sequence_idle_microseconds of 1 s.
//
// It never overwrites a value the configuration set.
func ApplyDefaults(cfg *inferencepb.ModelConfig, modelName string) {
	if cfg == nil {
		return
	}
	if cfg.Name == "" {
		cfg.Name = modelName
	}
	if cfg.VersionPolicy == nil || cfg.VersionPolicy.PolicyChoice == nil {
		cfg.VersionPolicy = &inferencepb.ModelVersionPolicy{
			PolicyChoice: &inferencepb.ModelVersionPolicy_Latest_{
				Latest: &inferencepb.ModelVersionPolicy_Latest{NumVersions: 1},
			},
		}
	}
	ensemble := cfg.Platform == "ensemble" || cfg.GetEnsembleScheduling() != nil
	if len(cfg.InstanceGroup) == 0 && !ensemble {
		cfg.InstanceGroup = []*inferencepb.ModelInstanceGroup{{Kind: inferencepb.ModelInstanceGroup_KIND_CPU}}
	}
	for i, g := range cfg.InstanceGroup {
		if g == nil {
			g = &inferencepb.ModelInstanceGroup{}
			cfg.InstanceGroup[i] = g
		}
		if g.Name == "" {
			g.Name = fmt.Sprintf("%s_%d", cfg.Name, i)
		}
		if g.Kind == inferencepb.ModelInstanceGroup_KIND_AUTO {
			g.Kind = inferencepb.ModelInstanceGroup_KIND_CPU
		}
		if g.Count == 0 {
			g.Count = DefaultInstanceCount(cfg.GetBackend(), cfg.GetPlatform(), g.Kind)
		}
	}
	if sb := cfg.GetSequenceBatching(); sb != nil && sb.MaxSequenceIdleMicroseconds == 0 {
		sb.MaxSequenceIdleMicroseconds = defaultSequenceIdle
	}
}

// DefaultInstanceCount is the count of an instance group that gives
// none, as Triton sets it: 2 for a KIND_CPU group of ONNX Runtime (its
// model configuration guide: "the default instance count will be 2 for
// selected backends (Onnxruntime)"), 1 for every other backend and kind,
// and 0 (not known yet) while neither backend nor platform is named.
func DefaultInstanceCount(backend, platform string, kind inferencepb.ModelInstanceGroup_Kind) int32 {
	switch {
	case backend == "" && platform == "":
		return 0
	case (backend == "onnxruntime" || (backend == "" && platform == "onnxruntime_onnx")) &&
		kind == inferencepb.ModelInstanceGroup_KIND_CPU:
		return 2
	default:
		return 1
	}
}

// AutoComplete fills what the configuration leaves out from the model's
// own signature (shapes include the batch dimension):
//   - max_batch_size: when it is 0 and every model input and output has a
//     variable (-1) first dimension, DefaultMaxBatchSize, unless a listed
//     tensor's dims already spell out the model's full rank (the user then
//     meant no batching);
//   - inputs and outputs: all of the model's when none are listed; for
//     listed ones, a missing data_type or dims. Dims drop the batch
//     dimension when batching; a tensor left with no dims is written as
//     dims [1] with reshape { shape: [] }, the way Triton spells a scalar.
//
// Listed tensors the model lacks are left for ValidateSignature to report.
// It never overwrites a field the user set. It fails only when the model
// cannot satisfy the configuration's batching at all.
func AutoComplete(cfg *inferencepb.ModelConfig, sig infer.Signature) error {
	if cfg == nil {
		return errors.New("autocomplete model configuration: nil config")
	}
	if cfg.MaxBatchSize == 0 && canBatch(sig) && !fullRankListed(cfg, sig) {
		cfg.MaxBatchSize = DefaultMaxBatchSize
	}
	batching := cfg.MaxBatchSize > 0
	var errs []error
	dims := func(kind string, spec infer.TensorSpec) ([]int64, *inferencepb.ModelTensorReshape) {
		shape := spec.Shape
		if batching {
			if len(shape) == 0 {
				errs = append(errs, fmt.Errorf("%s '%s': max_batch_size is %d but the model's %s is a scalar", kind, spec.Name, cfg.MaxBatchSize, kind))
				return nil, nil
			}
			shape = shape[1:]
		}
		if len(shape) == 0 {
			return []int64{1}, &inferencepb.ModelTensorReshape{Shape: []int64{}}
		}
		return slices.Clone(shape), nil
	}

	seqInputs, seqOutputs := ServerTensors(cfg)
	completeInputs(cfg, sig, seqInputs, dims)
	completeOutputs(cfg, sig, seqOutputs, dims)
	if len(errs) > 0 {
		return fmt.Errorf("autocomplete model configuration: %w", errors.Join(errs...))
	}
	return nil
}

// tensorDims returns the dims (and reshape) of a model tensor as the
// configuration writes them.
type tensorDims func(kind string, spec infer.TensorSpec) ([]int64, *inferencepb.ModelTensorReshape)

// completeInputs lists the model's inputs when none are listed (except
// those the sequence batcher fills, seq, and optional ones), or fills in
// a listed input's missing data type and dims.
func completeInputs(cfg *inferencepb.ModelConfig, sig infer.Signature, seq map[string]bool, dims tensorDims) {
	if len(cfg.Input) == 0 {
		for _, spec := range sig.Inputs {
			if seq[spec.Name] || spec.Optional {
				continue // filled by the sequence batcher, or has a value in the model
			}
			d, r := dims("input", spec)
			cfg.Input = append(cfg.Input, &inferencepb.ModelInput{Name: spec.Name, DataType: FromInfer(spec.DataType), Dims: d, Reshape: r})
		}
	} else {
		for _, in := range cfg.Input {
			spec, ok := findSpec(sig.Inputs, in.GetName())
			if in == nil || !ok {
				continue
			}
			if in.DataType == inferencepb.DataType_TYPE_INVALID {
				in.DataType = FromInfer(spec.DataType)
			}
			if len(in.Dims) == 0 && in.Reshape == nil {
				in.Dims, in.Reshape = dims("input", spec)
			}
		}
	}
}

// completeOutputs lists the model's outputs when none are listed (except
// the implicit states the sequence batcher reads, seq), or fills in a
// listed output's missing data type and dims.
func completeOutputs(cfg *inferencepb.ModelConfig, sig infer.Signature, seq map[string]bool, dims tensorDims) {
	if len(cfg.Output) == 0 {
		for _, spec := range sig.Outputs {
			if seq[spec.Name] {
				continue // an implicit state, read by the sequence batcher
			}
			d, r := dims("output", spec)
			cfg.Output = append(cfg.Output, &inferencepb.ModelOutput{Name: spec.Name, DataType: FromInfer(spec.DataType), Dims: d, Reshape: r})
		}
	} else {
		for _, out := range cfg.Output {
			spec, ok := findSpec(sig.Outputs, out.GetName())
			if out == nil || !ok {
				continue
			}
			if out.DataType == inferencepb.DataType_TYPE_INVALID {
				out.DataType = FromInfer(spec.DataType)
			}
			if len(out.Dims) == 0 && out.Reshape == nil {
				out.Dims, out.Reshape = dims("output", spec)
			}
		}
	}
}

// canBatch reports whether every model tensor has a variable first
// dimension.
func canBatch(sig infer.Signature) bool {
	if len(sig.Inputs) == 0 && len(sig.Outputs) == 0 {
		return false
	}
	for _, specs := range [][]infer.TensorSpec{sig.Inputs, sig.Outputs} {
		for _, s := range specs {
			if s.Optional {
				continue // an initializer-backed input need not batch
			}
			if len(s.Shape) == 0 || s.Shape[0] != -1 {
				return false
			}
		}
	}
	return true
}

// fullRankListed reports whether a listed tensor's dims have the model's
// full rank, which means the user wrote the batch dimension themselves.
func fullRankListed(cfg *inferencepb.ModelConfig, sig infer.Signature) bool {
	for _, in := range cfg.Input {
		if s, ok := findSpec(sig.Inputs, in.GetName()); ok && len(in.GetDims()) > 0 && len(in.Dims) == len(s.Shape) {
			return true
		}
	}
	for _, out := range cfg.Output {
		if s, ok := findSpec(sig.Outputs, out.GetName()); ok && len(out.GetDims()) > 0 && len(out.Dims) == len(s.Shape) {
			return true
		}
	}
	return false
}

func findSpec(specs []infer.TensorSpec, name string) (infer.TensorSpec, bool) {
	for _, s := range specs {
		if s.Name == name {
			return s, true
		}
	}
	return infer.TensorSpec{}, false
}
