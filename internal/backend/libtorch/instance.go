package libtorch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
)

// Instance is one TorchScript module loaded in-process.
type Instance struct {
	mu     sync.Mutex // serialises forward() and Close
	m      module
	closed bool

	inNames []string // config input names in forward()'s argument order
	inTypes []infer.DataType
	inPos   map[string]int
	out     map[string]outSpec // by config output name
}

type outSpec struct {
	index    int // element of forward()'s flattened result
	dataType infer.DataType
}

// newInstance maps the configuration's inputs onto forward()'s arguments
// and its outputs onto forward()'s result, by Triton's rules.
func newInstance(m module, opts backend.LoadOptions) (*Instance, error) {
	cfg := opts.Config
	argNames, _ := m.args()
	in := &Instance{m: m, inPos: map[string]int{}, out: map[string]outSpec{}}
	ins := cfg.GetInput()
	if len(ins) != len(argNames) {
		return nil, fmt.Errorf("the configuration declares %d inputs, forward() takes %d (%v)", len(ins), len(argNames), argNames)
	}
	byArg := true
	byIndex := true
	for _, t := range ins {
		if !slices.Contains(argNames, t.GetName()) {
			byArg = false
		}
		if namedIndex.FindStringSubmatch(t.GetName()) == nil {
			byIndex = false
		}
	}
	in.inNames = make([]string, len(ins))
	in.inTypes = make([]infer.DataType, len(ins))
	for i, t := range ins {
		pos := i
		switch {
		case byArg:
			pos = slices.Index(argNames, t.GetName())
		case byIndex:
			pos, _ = strconv.Atoi(namedIndex.FindStringSubmatch(t.GetName())[1])
		}
		if pos < 0 || pos >= len(ins) || in.inNames[pos] != "" {
			return nil, fmt.Errorf("input '%s' maps to forward() argument %d, which is out of range or taken: name inputs after forward()'s arguments or <name>__<index> with indexes 0..%d", t.GetName(), pos, len(ins)-1)
		}
		in.inNames[pos] = t.GetName()
		in.inTypes[pos] = modelconfig.ToInfer(t.GetDataType())
		in.inPos[t.GetName()] = pos
	}
	outs := cfg.GetOutput()
	outIndex := true
	for _, t := range outs {
		if namedIndex.FindStringSubmatch(t.GetName()) == nil {
			outIndex = false
		}
	}
	for i, t := range outs {
		idx := i
		if outIndex {
			idx, _ = strconv.Atoi(namedIndex.FindStringSubmatch(t.GetName())[1])
		}
		in.out[t.GetName()] = outSpec{index: idx, dataType: modelconfig.ToInfer(t.GetDataType())}
	}
	return in, nil
}

// Execute runs forward() once on inputs (batch dimension included when the
// model batches) and returns the outputs named, in order.
func (in *Instance) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	ordered := make([]*infer.Tensor, len(in.inNames))
	for i := range inputs {
		t := &inputs[i]
		pos, ok := in.inPos[t.Name]
		if !ok {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonUnknownInput, "unexpected inference input '%s', allowed inputs are: %v", t.Name, in.inNames)
		}
		if ordered[pos] != nil {
			return nil, apierr.Errorf(apierr.KindInvalid, apierr.ReasonDuplicateInput, "input '%s' given more than once", t.Name)
		}
		if t.DataType != in.inTypes[pos] {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonDatatypeMismatch,
				"input '%s' has datatype %s, the model wants %s", t.Name, t.DataType, in.inTypes[pos])
		}
		if err := t.CheckSize(); err != nil {
			return nil, &apierr.Error{Kind: apierr.KindInvalid, Reason: ReasonInvalidSize, Msg: "input '" + t.Name + "'", Err: err}
		}
		ordered[pos] = t
	}
	for i, t := range ordered {
		if t == nil {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonMissingInput, "expected input '%s' is missing", in.inNames[i])
		}
	}
	specs := make([]outSpec, len(outputs))
	for i, name := range outputs {
		s, ok := in.out[name]
		if !ok {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonUnknownOutput, "unexpected inference output '%s'", name)
		}
		specs[i] = s
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil, errors.New("libtorch instance is closed")
	}
	res, err := in.m.forward(ordered)
	in.mu.Unlock()
	if err != nil {
		return nil, &apierr.Error{Kind: apierr.KindInternal, Reason: ReasonBackendError, Msg: "libtorch forward()", Err: errors.New(err.Error())}
	}
	out := make([]infer.Tensor, len(outputs))
	for i, name := range outputs {
		s := specs[i]
		if s.index >= len(res) {
			return nil, apierr.Errorf(apierr.KindInternal, ReasonInvalidModelOutput,
				"output '%s' is element %d of forward()'s result, which has %d tensors", name, s.index, len(res))
		}
		r := res[s.index]
		if r.dataType != s.dataType {
			return nil, apierr.Errorf(apierr.KindInternal, ReasonInvalidModelOutput,
				"output '%s': the model returned %s, the configuration says %s", name, r.dataType, s.dataType)
		}
		out[i] = infer.Tensor{Name: name, DataType: r.dataType, Shape: r.shape, Data: r.data}
	}
	return out, nil
}

// Close frees the module.
func (in *Instance) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.closed {
		in.closed = true
		in.m.free()
	}
	return nil
}
