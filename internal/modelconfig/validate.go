package modelconfig

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Bounds that keep a configuration (which the repository-load API accepts
// from clients) from asking for unbounded resources.
const (
	MaxInstanceCount = 1024 // instances in one instance group
	MaxWarmupCount   = 1000 // repetitions of one warmup request
	// MaxPriorityQueuePolicies bounds the priority_queue_policy entries
	// (each a queue of its own); priority_levels itself is unbounded.
	MaxPriorityQueuePolicies = 1 << 16
)

// validator collects problems with the position of the field each is about.
type validator struct {
	cfg *inferencepb.ModelConfig
	src *Source
	ps  Errors
}

func (v *validator) add(path, format string, args ...any) {
	v.ps = append(v.ps, Error{Pos: v.src.Pos(path), Msg: fmt.Sprintf(format, args...)})
}

// Validate checks a configuration on its own (after ApplyDefaults and
// AutoComplete) and reports every problem found, each at the position of
// the offending field in src (which may be nil).
func Validate(cfg *inferencepb.ModelConfig, src *Source) Errors {
	v := &validator{cfg: cfg, src: src}
	if cfg == nil {
		v.add("", "model configuration is empty")
		return v.ps
	}
	if cfg.Name == "" {
		v.add("name", "name must be set")
	}
	if cfg.MaxBatchSize < 0 {
		v.add("max_batch_size", "max_batch_size must be >= 0, got %d", cfg.MaxBatchSize)
	}
	v.inputs()
	v.outputs()
	v.versionPolicy()
	v.instanceGroups()
	v.dynamicBatching()
	v.sequenceBatching()
	v.batchInputsOutputs()
	v.ensemble()
	v.warmup()
	return v.sorted()
}

// sorted orders the problems by position in the file, those without a
// position last, keeping the order found among equals.
func (v *validator) sorted() Errors {
	slices.SortStableFunc(v.ps, func(a, b Error) int {
		ka, kb := a.Pos.Line, b.Pos.Line
		if ka <= 0 {
			ka = math.MaxInt
		}
		if kb <= 0 {
			kb = math.MaxInt
		}
		if ka != kb {
			return cmp.Compare(ka, kb)
		}
		return cmp.Compare(a.Pos.Col, b.Pos.Col)
	})
	return v.ps
}

func (v *validator) inputs() {
	if len(v.cfg.Input) == 0 {
		v.add("input", "the configuration lists no inputs")
	}
	seen := map[string]int{}
	for i, in := range v.cfg.Input {
		base := "input[" + strconv.Itoa(i) + "]"
		if in == nil {
			v.add(base, "%s is empty", base)
			continue
		}
		if !v.tensorName("input", base, in.Name, i, seen) {
			continue
		}
		label := fmt.Sprintf("input '%s'", in.Name)
		v.dataType(base+".data_type", label, in.DataType)
		if _, ok := inferencepb.ModelInput_Format_name[int32(in.Format)]; !ok {
			v.add(base+".format", "%s: unknown format %d", label, in.Format)
		} else if in.Format != inferencepb.ModelInput_FORMAT_NONE && len(in.Dims) != 3 {
			v.add(base+".format", "%s: format %s needs 3 dims, got %s", label, in.Format, infer.Shape(in.Dims))
		}
		v.dims(base, label, in.Dims, in.Reshape)
	}
}

func (v *validator) outputs() {
	if len(v.cfg.Output) == 0 {
		v.add("output", "the configuration lists no outputs")
	}
	seen := map[string]int{}
	for i, out := range v.cfg.Output {
		base := "output[" + strconv.Itoa(i) + "]"
		if out == nil {
			v.add(base, "%s is empty", base)
			continue
		}
		if !v.tensorName("output", base, out.Name, i, seen) {
			continue
		}
		label := fmt.Sprintf("output '%s'", out.Name)
		v.dataType(base+".data_type", label, out.DataType)
		v.dims(base, label, out.Dims, out.Reshape)
	}
}

// tensorName checks that a tensor is named and that the name is unique.
func (v *validator) tensorName(kind, base, name string, i int, seen map[string]int) bool {
	if name == "" {
		v.add(base, "%s: name must be set", base)
		return false
	}
	if j, dup := seen[name]; dup {
		v.add(base+".name", "%s '%s': the name is used twice (also %s[%d])", kind, name, kind, j)
		return true
	}
	seen[name] = i
	return true
}

func (v *validator) dataType(path, label string, dt inferencepb.DataType) {
	switch {
	case dt == inferencepb.DataType_TYPE_INVALID:
		v.add(path, "%s: data_type must be set", label)
	case !ToInfer(dt).Valid():
		v.add(path, "%s: unknown data_type %d", label, dt)
	}
}

// dims checks a tensor's dims and reshape: every dimension >= 1 or -1,
// dims present unless batching supplies the only dimension, and a reshape
// that holds the same number of elements.
func (v *validator) dims(base, label string, dims []int64, reshape *inferencepb.ModelTensorReshape) {
	if len(dims) == 0 && v.cfg.MaxBatchSize == 0 {
		v.add(base, "%s: dims must be set; a scalar is written as dims: [1] with reshape: { shape: [] }", label)
	}
	ok := true
	for j, d := range dims {
		if d < -1 || d == 0 {
			v.add(fmt.Sprintf("%s.dims[%d]", base, j), "%s: dims %s: each dimension must be >= 1, or -1 for a variable size; got %d", label, infer.Shape(dims), d)
			ok = false
		}
	}
	if reshape == nil {
		return
	}
	for j, d := range reshape.Shape {
		if d < -1 || d == 0 {
			v.add(fmt.Sprintf("%s.reshape.shape[%d]", base, j), "%s: reshape %s: each dimension must be >= 1, or -1 for a variable size; got %d", label, infer.Shape(reshape.Shape), d)
			ok = false
		}
	}
	if !ok {
		return
	}
	dv, dn := countElements(dims)
	rv, rn := countElements(reshape.Shape)
	switch {
	case dv != rv:
		v.add(base+".reshape", "%s: reshape %s must have as many variable (-1) dimensions as dims %s", label, infer.Shape(reshape.Shape), infer.Shape(dims))
	case dv == 0 && dn != rn:
		v.add(base+".reshape", "%s: reshape %s holds %d elements but dims %s hold %d", label, infer.Shape(reshape.Shape), rn, infer.Shape(dims), dn)
	}
}

// countElements returns the number of variable dimensions and the product
// of the fixed ones, saturating at infer.MaxElements+1.
func countElements(shape []int64) (variable int, n int64) {
	n = 1
	for _, d := range shape {
		if d < 0 {
			variable++
			continue
		}
		if n > (infer.MaxElements+1)/d {
			n = infer.MaxElements + 1
			continue
		}
		n *= d
	}
	return variable, n
}

func (v *validator) versionPolicy() {
	vp := v.cfg.VersionPolicy
	if vp == nil {
		return
	}
	switch p := vp.PolicyChoice.(type) {
	case *inferencepb.ModelVersionPolicy_Latest_:
		if p.Latest.GetNumVersions() == 0 {
			v.add("version_policy.latest", "version_policy: latest.num_versions must be >= 1")
		}
	case *inferencepb.ModelVersionPolicy_Specific_:
		versions := p.Specific.GetVersions()
		if len(versions) == 0 {
			v.add("version_policy.specific", "version_policy: specific must list at least one version")
		}
		seen := map[int64]bool{}
		for j, ver := range versions {
			path := fmt.Sprintf("version_policy.specific.versions[%d]", j)
			switch {
			case ver <= 0:
				v.add(path, "version_policy: specific version %d must be > 0", ver)
			case seen[ver]:
				v.add(path, "version_policy: specific version %d is listed twice", ver)
			}
			seen[ver] = true
		}
	}
}

func (v *validator) instanceGroups() {
	for i, g := range v.cfg.InstanceGroup {
		base := "instance_group[" + strconv.Itoa(i) + "]"
		if g == nil {
			continue
		}
		switch g.Kind {
		case inferencepb.ModelInstanceGroup_KIND_GPU:
			v.add(base+".kind", "%s: KIND_GPU is not supported: no GPU execution provider is available; use KIND_CPU", base)
		case inferencepb.ModelInstanceGroup_KIND_AUTO, inferencepb.ModelInstanceGroup_KIND_CPU, inferencepb.ModelInstanceGroup_KIND_MODEL:
			if len(g.Gpus) > 0 {
				v.add(base+".gpus", "%s: gpus %v are listed but no GPU execution provider is available", base, g.Gpus)
			}
		default:
			v.add(base+".kind", "%s: unknown kind %d", base, g.Kind)
		}
		switch {
		case g.Count < 0:
			v.add(base+".count", "%s: count must be >= 0, got %d", base, g.Count)
		case g.Count > MaxInstanceCount:
			v.add(base+".count", "%s: count %d exceeds the limit of %d", base, g.Count, MaxInstanceCount)
		}
	}
}

func (v *validator) dynamicBatching() {
	db := v.cfg.GetDynamicBatching()
	if db == nil {
		return
	}
	maxBatch := v.cfg.MaxBatchSize
	if maxBatch <= 0 {
		v.add("dynamic_batching", "dynamic_batching requires max_batch_size > 0, got %d", maxBatch)
	}
	for j, s := range db.PreferredBatchSize {
		path := fmt.Sprintf("dynamic_batching.preferred_batch_size[%d]", j)
		switch {
		case s < 1:
			v.add(path, "dynamic_batching: preferred_batch_size %d must be >= 1", s)
		case maxBatch > 0 && s > maxBatch:
			v.add(path, "dynamic_batching: preferred_batch_size %d exceeds max_batch_size %d", s, maxBatch)
		}
	}
	// Any number of levels, as Triton takes any uint64 (its QA loads
	// 2^64-1: qa/L0_model_queue test_max_priority_levels); the model
	// server maps many levels onto fewer queues.
	levels := db.PriorityLevels
	switch {
	case levels == 0:
		if db.DefaultPriorityLevel != 0 {
			v.add("dynamic_batching.default_priority_level", "dynamic_batching: default_priority_level %d is set but priority_levels is 0", db.DefaultPriorityLevel)
		}
	case db.DefaultPriorityLevel < 1 || db.DefaultPriorityLevel > levels:
		// As Triton: with priority levels, the default level must be one of
		// them; 0 (or leaving it out) is not "the middle" but an error.
		v.add("dynamic_batching.default_priority_level", "dynamic_batching: default_priority_level %d must be in [1, %d] (priority_levels is %d; 1 is the highest level)", db.DefaultPriorityLevel, levels, levels)
	}
	v.queuePolicy("dynamic_batching.default_queue_policy", db.DefaultQueuePolicy)
	if n := len(db.PriorityQueuePolicy); n > MaxPriorityQueuePolicies {
		v.add("dynamic_batching.priority_queue_policy", "dynamic_batching: %d priority_queue_policy entries exceed the limit of %d", n, MaxPriorityQueuePolicies)
		return
	}
	keys := make([]uint64, 0, len(db.PriorityQueuePolicy))
	for k := range db.PriorityQueuePolicy {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		path := fmt.Sprintf("dynamic_batching.priority_queue_policy[%d]", k)
		if k < 1 || k > levels {
			v.add(path, "dynamic_batching: priority_queue_policy for level %d is outside [1, %d]", k, levels)
		}
		v.queuePolicy(path, db.PriorityQueuePolicy[k])
	}
}

func (v *validator) queuePolicy(path string, qp *inferencepb.ModelQueuePolicy) {
	if qp == nil {
		return
	}
	if _, ok := inferencepb.ModelQueuePolicy_TimeoutAction_name[int32(qp.TimeoutAction)]; !ok {
		v.add(path+".timeout_action", "dynamic_batching: unknown timeout_action %d", qp.TimeoutAction)
	}
}

func (v *validator) ensemble() {
	es := v.cfg.GetEnsembleScheduling()
	if es == nil {
		if v.cfg.Platform == "ensemble" {
			v.add("platform", "platform \"ensemble\" needs ensemble_scheduling")
		}
		return
	}
	if len(es.Step) == 0 {
		v.add("ensemble_scheduling", "ensemble_scheduling must list at least one step")
	}
	for i, st := range es.Step {
		if st.GetModelName() == "" {
			v.add(fmt.Sprintf("ensemble_scheduling.step[%d]", i), "ensemble_scheduling: step[%d]: model_name must be set", i)
		}
	}
}

func (v *validator) warmup() {
	inputs := map[string]*inferencepb.ModelInput{}
	var names []string
	for _, in := range v.cfg.Input {
		if in != nil && in.Name != "" {
			if _, dup := inputs[in.Name]; !dup {
				names = append(names, in.Name)
			}
			inputs[in.Name] = in
		}
	}
	for i, w := range v.cfg.ModelWarmup {
		base := "model_warmup[" + strconv.Itoa(i) + "]"
		if w == nil {
			continue
		}
		limit := max(v.cfg.MaxBatchSize, 1)
		if w.BatchSize > uint32(limit) {
			v.add(base+".batch_size", "%s: batch_size %d exceeds max_batch_size %d", base, w.BatchSize, v.cfg.MaxBatchSize)
		}
		if w.Count > MaxWarmupCount {
			v.add(base+".count", "%s: count %d exceeds the limit of %d", base, w.Count, MaxWarmupCount)
		}
		keys := make([]string, 0, len(w.Inputs))
		for k := range w.Inputs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			wi := w.Inputs[k]
			path := base + ".inputs[" + strconv.Quote(k) + "]"
			in, ok := inputs[k]
			if !ok {
				v.add(path, "%s: '%s' is not an input of the model; inputs are [%s]", base, k, strings.Join(names, ", "))
				continue
			}
			if wi == nil {
				wi = &inferencepb.ModelWarmup_Input{}
			}
			if wi.DataType != in.DataType {
				v.add(path+".data_type", "%s: input '%s': data_type %s does not match the input's %s", base, k, wi.DataType, in.DataType)
			}
			for j, d := range wi.Dims {
				if d < 0 {
					v.add(fmt.Sprintf("%s.dims[%d]", path, j), "%s: input '%s': dims %s must be concrete (>= 0)", base, k, infer.Shape(wi.Dims))
					break
				}
			}
			if _, err := infer.Shape(wi.Dims).Elements(); err != nil && !slices.ContainsFunc(wi.Dims, func(d int64) bool { return d < 0 }) {
				v.add(path+".dims", "%s: input '%s': %v", base, k, err)
			}
			switch d := wi.InputDataType.(type) {
			case nil:
				v.add(path, "%s: input '%s' needs one of zero_data, random_data or input_data_file", base, k)
			case *inferencepb.ModelWarmup_Input_InputDataFile:
				if !filepath.IsLocal(d.InputDataFile) {
					v.add(path+".input_data_file", "%s: input '%s': input_data_file %q must be a relative path inside the model's warmup folder", base, k, d.InputDataFile)
				}
			}
		}
		for _, name := range names {
			if _, ok := w.Inputs[name]; !ok && !inputs[name].Optional {
				v.add(base, "%s: input '%s' is missing", base, name)
			}
		}
	}
}

// ValidateSignature checks a configuration against the inputs and outputs
// the model really has (shapes include the batch dimension): every listed
// tensor exists with the same data type and compatible dims, the model's
// first dimension is variable when max_batch_size > 0, and every model
// input is listed.
func ValidateSignature(cfg *inferencepb.ModelConfig, sig infer.Signature, src *Source) Errors {
	v := &validator{cfg: cfg, src: src}
	if cfg == nil {
		v.add("", "model configuration is empty")
		return v.ps
	}
	listed := map[string]bool{}
	for i, in := range cfg.Input {
		if in == nil {
			continue
		}
		listed[in.Name] = true
		if v.raggedInput(i, in, sig.Inputs) {
			continue
		}
		v.checkTensor("input", i, in.Name, in.DataType, in.Dims, in.Reshape, sig.Inputs)
	}
	for i, out := range cfg.Output {
		if out == nil {
			continue
		}
		if v.scatteredOutput(i, out, sig.Outputs) {
			continue
		}
		v.checkTensor("output", i, out.Name, out.DataType, out.Dims, out.Reshape, sig.Outputs)
	}
	seqInputs, _ := ServerTensors(cfg)
	v.sequenceSignature(sig)
	v.batchInputSignature(sig)
	for _, spec := range sig.Inputs {
		if !listed[spec.Name] && !seqInputs[spec.Name] && !spec.Optional {
			v.add("input", "input '%s': the model has this input (%s %s) but the configuration does not list it", spec.Name, FromInfer(spec.DataType), spec.Shape)
		}
	}
	return v.sorted()
}

func (v *validator) checkTensor(kind string, i int, name string, dt inferencepb.DataType, dims []int64, reshape *inferencepb.ModelTensorReshape, specs []infer.TensorSpec) {
	base := fmt.Sprintf("%s[%d]", kind, i)
	spec, ok := findSpec(specs, name)
	if !ok {
		names := make([]string, len(specs))
		for j, s := range specs {
			names[j] = s.Name
		}
		v.add(base+".name", "%s '%s': the model has no such %s; its %ss are [%s]", kind, name, kind, kind, strings.Join(names, ", "))
		return
	}
	if got := ToInfer(dt); got != spec.DataType {
		v.add(base+".data_type", "%s '%s': config data_type %s does not match the model's %s", kind, name, dt, FromInfer(spec.DataType))
	}
	what, shape, path := "dims", dims, base+".dims"
	if reshape != nil {
		what, shape, path = "reshape", reshape.Shape, base+".reshape"
	}
	model := spec.Shape
	if maxBatch := v.cfg.MaxBatchSize; maxBatch > 0 {
		if len(model) == 0 {
			v.add(path, "%s '%s': max_batch_size is %d but the model's %s is a scalar", kind, name, maxBatch, kind)
			return
		}
		if model[0] != -1 {
			v.add(base, "%s '%s': max_batch_size is %d but the model's first dimension is fixed at %d", kind, name, maxBatch, model[0])
		}
		model = model[1:]
	}
	if !dimsMatch(shape, model) {
		v.add(path, "%s '%s': config %s %s do not match the model's %s", kind, name, what, infer.Shape(shape), spec.Shape)
	}
}

// dimsMatch reports whether config dims agree with the model's: same rank,
// and equal wherever the model's dimension is fixed.
func dimsMatch(cfg, model []int64) bool {
	if len(cfg) != len(model) {
		return false
	}
	for i := range cfg {
		if model[i] != -1 && cfg[i] != model[i] {
			return false
		}
	}
	return true
}

// ClientSignature returns the inputs and outputs clients see in model
// metadata: config dims (not reshape) with -1 prepended when
// max_batch_size > 0, and protocol data types.
func ClientSignature(cfg *inferencepb.ModelConfig) infer.Signature {
	var sig infer.Signature
	if cfg == nil {
		return sig
	}
	shape := func(dims []int64) infer.Shape {
		s := make(infer.Shape, 0, len(dims)+1)
		if cfg.MaxBatchSize > 0 {
			s = append(s, -1)
		}
		return append(s, dims...)
	}
	for _, in := range cfg.Input {
		if in != nil {
			sig.Inputs = append(sig.Inputs, infer.TensorSpec{Name: in.Name, DataType: ToInfer(in.DataType), Shape: shape(in.Dims)})
		}
	}
	for _, out := range cfg.Output {
		if out != nil {
			sig.Outputs = append(sig.Outputs, infer.TensorSpec{Name: out.Name, DataType: ToInfer(out.DataType), Shape: shape(out.Dims)})
		}
	}
	return sig
}
