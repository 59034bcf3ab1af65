package modelconfig

import (
	"fmt"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// SequenceControlType is the data type of a sequence batching control:
// CORRID's data_type, else the type its false/true pair is written in
// (int32_false_true, fp32_false_true or bool_false_true). It returns
// TYPE_INVALID when the control sets none or several.
func SequenceControlType(c *inferencepb.ModelSequenceBatching_Control) inferencepb.DataType {
	if c.GetKind() == inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID {
		return c.GetDataType()
	}
	var dt inferencepb.DataType
	n := 0
	if len(c.GetInt32FalseTrue()) > 0 {
		dt, n = inferencepb.DataType_TYPE_INT32, n+1
	}
	if len(c.GetFp32FalseTrue()) > 0 {
		dt, n = inferencepb.DataType_TYPE_FP32, n+1
	}
	if len(c.GetBoolFalseTrue()) > 0 {
		dt, n = inferencepb.DataType_TYPE_BOOL, n+1
	}
	if n != 1 {
		return inferencepb.DataType_TYPE_INVALID
	}
	return dt
}

// ServerTensors names the model inputs and outputs the server feeds and
// reads itself: the sequence batcher's control inputs and implicit states,
// and the dynamic batcher's batch inputs. They are model tensors that
// clients never send and the configuration does not list. Both maps are
// empty when the config has none.
func ServerTensors(cfg *inferencepb.ModelConfig) (inputs, outputs map[string]bool) {
	inputs, outputs = map[string]bool{}, map[string]bool{}
	sb := cfg.GetSequenceBatching()
	for _, ci := range sb.GetControlInput() {
		inputs[ci.GetName()] = true
	}
	for _, st := range sb.GetState() {
		inputs[st.GetInputName()] = true
		outputs[st.GetOutputName()] = true
	}
	for _, bi := range cfg.GetBatchInput() {
		for _, t := range bi.GetTargetName() {
			inputs[t] = true
		}
	}
	return inputs, outputs
}

// sequenceBatching checks sequence_batching as Triton does: each control
// input carries one control, each kind appears once, START/END/READY
// give a false/true pair in exactly one type and CORRID an integer or
// string data_type; states name their tensors, a data type and concrete
// dims (or an initial state that gives them).
func (v *validator) sequenceBatching() {
	sb := v.cfg.GetSequenceBatching()
	if sb == nil {
		return
	}
	const base = "sequence_batching"
	if sb.GetIterativeSequence() {
		v.add(base+".iterative_sequence", "sequence_batching: iterative_sequence is not supported by this server")
	}
	listed := map[string]bool{}
	for _, in := range v.cfg.GetInput() {
		listed[in.GetName()] = true
	}
	seenKind := map[inferencepb.ModelSequenceBatching_Control_Kind]bool{}
	seenName := map[string]bool{}
	for i, ci := range sb.GetControlInput() {
		path := fmt.Sprintf("%s.control_input[%d]", base, i)
		name := ci.GetName()
		switch {
		case name == "":
			v.add(path, "sequence_batching: control_input[%d]: name must be set", i)
		case listed[name]:
			v.add(path+".name", "sequence_batching: control input '%s' is also listed as an input; the server fills it, clients do not send it", name)
		case seenName[name]:
			v.add(path+".name", "sequence_batching: control input '%s' appears more than once", name)
		}
		seenName[name] = true
		if len(ci.GetControl()) != 1 {
			v.add(path, "sequence_batching: control input '%s' must have exactly one control, got %d", name, len(ci.GetControl()))
		}
		for j, c := range ci.GetControl() {
			cpath := fmt.Sprintf("%s.control[%d]", path, j)
			kind := c.GetKind()
			if _, ok := inferencepb.ModelSequenceBatching_Control_Kind_name[int32(kind)]; !ok {
				v.add(cpath+".kind", "sequence_batching: control input '%s': unknown control kind %d", name, kind)
				continue
			}
			if seenKind[kind] {
				v.add(cpath+".kind", "sequence_batching: control %s appears more than once", kind)
			}
			seenKind[kind] = true
			v.sequenceControl(cpath, name, c)
		}
	}
	for i, st := range sb.GetState() {
		v.sequenceState(fmt.Sprintf("%s.state[%d]", base, i), st, listed, seenName)
	}
	switch sb.GetStrategyChoice().(type) {
	case *inferencepb.ModelSequenceBatching_Oldest:
		o := sb.GetOldest()
		if o.GetMaxCandidateSequences() < 0 {
			v.add(base+".oldest.max_candidate_sequences", "sequence_batching: max_candidate_sequences must be >= 0, got %d", o.GetMaxCandidateSequences())
		}
		if o.GetMaxCandidateSequences() > MaxInstanceCount*1024 {
			v.add(base+".oldest.max_candidate_sequences", "sequence_batching: max_candidate_sequences %d exceeds the limit of %d", o.GetMaxCandidateSequences(), MaxInstanceCount*1024)
		}
		for j, s := range o.GetPreferredBatchSize() {
			if s < 1 || s > max(v.cfg.GetMaxBatchSize(), 1) {
				v.add(fmt.Sprintf("%s.oldest.preferred_batch_size[%d]", base, j), "sequence_batching: preferred_batch_size %d must be in [1, %d]", s, max(v.cfg.GetMaxBatchSize(), 1))
			}
		}
	case *inferencepb.ModelSequenceBatching_Direct:
		if u := sb.GetDirect().GetMinimumSlotUtilization(); u < 0 || u > 1 {
			v.add(base+".direct.minimum_slot_utilization", "sequence_batching: minimum_slot_utilization must be in [0, 1], got %g", u)
		}
	}
}

func (v *validator) sequenceControl(path, input string, c *inferencepb.ModelSequenceBatching_Control) {
	kind := c.GetKind()
	if kind == inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID {
		switch c.GetDataType() {
		case inferencepb.DataType_TYPE_UINT64, inferencepb.DataType_TYPE_INT64, inferencepb.DataType_TYPE_UINT32,
			inferencepb.DataType_TYPE_INT32, inferencepb.DataType_TYPE_STRING:
		default:
			v.add(path+".data_type", "sequence_batching: control input '%s': %s needs data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING, got %s", input, kind, c.GetDataType())
		}
		if len(c.GetInt32FalseTrue())+len(c.GetFp32FalseTrue())+len(c.GetBoolFalseTrue()) > 0 {
			v.add(path, "sequence_batching: control input '%s': %s takes no false/true values", input, kind)
		}
		return
	}
	if SequenceControlType(c) == inferencepb.DataType_TYPE_INVALID {
		v.add(path, "sequence_batching: control input '%s': %s needs exactly one of int32_false_true, fp32_false_true or bool_false_true", input, kind)
		return
	}
	for _, n := range []int{len(c.GetInt32FalseTrue()), len(c.GetFp32FalseTrue()), len(c.GetBoolFalseTrue())} {
		if n != 0 && n != 2 {
			v.add(path, "sequence_batching: control input '%s': %s needs exactly two values (false, true), got %d", input, kind, n)
		}
	}
}

func (v *validator) sequenceState(path string, st *inferencepb.ModelSequenceBatching_State, listed, controls map[string]bool) {
	in, out := st.GetInputName(), st.GetOutputName()
	if in == "" || out == "" {
		v.add(path, "sequence_batching: state needs input_name and output_name")
		return
	}
	if listed[in] || controls[in] {
		v.add(path+".input_name", "sequence_batching: state input '%s' is also listed as an input or control input", in)
	}
	controls[in] = true
	dt := st.GetDataType()
	if dt == inferencepb.DataType_TYPE_INVALID {
		v.add(path+".data_type", "sequence_batching: state '%s': data_type must be set", in)
	} else {
		v.dataType(path+".data_type", fmt.Sprintf("state '%s'", in), dt)
	}
	if len(st.GetDims()) == 0 {
		v.add(path+".dims", "sequence_batching: state '%s': dims must be set", in)
	}
	if len(st.GetInitialState()) > 1 {
		v.add(path+".initial_state", "sequence_batching: state '%s': at most one initial_state", in)
	}
	for _, d := range st.GetDims() {
		if d == 0 {
			v.add(path+".dims", "sequence_batching: state '%s': dims %s hold a zero dimension", in, infer.Shape(st.GetDims()))
		}
	}
	for j, is := range st.GetInitialState() {
		ipath := fmt.Sprintf("%s.initial_state[%d]", path, j)
		if is.GetDataType() != dt {
			v.add(ipath+".data_type", "sequence_batching: state '%s': initial_state data_type %s differs from the state's %s", in, is.GetDataType(), dt)
		}
		if !dimsMatch(is.GetDims(), st.GetDims()) {
			v.add(ipath+".dims", "sequence_batching: state '%s': initial_state dims %s do not fit the state's %s", in, infer.Shape(is.GetDims()), infer.Shape(st.GetDims()))
		}
		for _, d := range is.GetDims() {
			if d < 0 {
				v.add(ipath+".dims", "sequence_batching: state '%s': initial_state dims %s must be concrete", in, infer.Shape(is.GetDims()))
				break
			}
		}
		if is.GetStateData() == nil {
			v.add(ipath, "sequence_batching: state '%s': initial_state needs zero_data or data_file", in)
		}
	}
	// Variable dims without an initial_state are fine: the state starts
	// as zeros with 1 for each variable dimension, as Triton's
	// (qa/L0_implicit_state trial v).
}

// sequenceSignature checks the control inputs and states against the
// model: each exists with the control's (or state's) data type.
func (v *validator) sequenceSignature(sig infer.Signature) {
	sb := v.cfg.GetSequenceBatching()
	for i, ci := range sb.GetControlInput() {
		for _, c := range ci.GetControl() {
			want := SequenceControlType(c)
			v.sequenceTensor(fmt.Sprintf("sequence_batching.control_input[%d]", i), "sequence_batching: control input", ci.GetName(), want, sig.Inputs)
		}
	}
	for i, st := range sb.GetState() {
		path := fmt.Sprintf("sequence_batching.state[%d]", i)
		v.sequenceTensor(path, "sequence_batching: state input", st.GetInputName(), st.GetDataType(), sig.Inputs)
		v.sequenceTensor(path, "sequence_batching: state output", st.GetOutputName(), st.GetDataType(), sig.Outputs)
	}
}

func (v *validator) sequenceTensor(path, what, name string, want inferencepb.DataType, specs []infer.TensorSpec) {
	if name == "" || want == inferencepb.DataType_TYPE_INVALID {
		return // reported by Validate
	}
	spec, ok := findSpec(specs, name)
	if !ok {
		v.add(path, "%s '%s': the model has no such tensor", what, name)
		return
	}
	if got := ToInfer(want); got != spec.DataType {
		v.add(path, "%s '%s' is %s in the configuration but %s in the model", what, name, want, FromInfer(spec.DataType))
	}
}
