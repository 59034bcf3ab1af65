//go:build cgo

package onnxruntime

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/backend"
	"github.com/sluice-ml/sluice/internal/infer"
)

// Instance is one ONNX Runtime session. ONNX Runtime's Run is safe to call
// from several goroutines; every call brings its own tensors.
type Instance struct {
	model     string
	version   int64
	sig       infer.Signature
	inputIdx  map[string]int // input name -> position in sig.Inputs
	outputIdx map[string]int // output name -> position in sig.Outputs
	all       []int          // every output position, in order; read only
	session   *ort.DynamicAdvancedSession
	// withOptional runs the requests that give the model's
	// initializer-backed inputs (all of them): a second session whose
	// signature lists them. nil when the model has none.
	withOptional *Instance
	pool         ioPool
	closeOnce    sync.Once
	closeErr     error
}

var _ backend.Instance = (*Instance)(nil)

func newInstance(model string, version int64, sig infer.Signature, s *ort.DynamicAdvancedSession) *Instance {
	in := &Instance{
		model: model, version: version, sig: sig, session: s,
		inputIdx:  make(map[string]int, len(sig.Inputs)),
		outputIdx: make(map[string]int, len(sig.Outputs)),
	}
	for i, t := range sig.Inputs {
		in.inputIdx[t.Name] = i
	}
	for i, t := range sig.Outputs {
		in.outputIdx[t.Name] = i
		in.all = append(in.all, i)
	}
	in.pool.usable = poolUsable(sig)
	return in
}

// Signature returns the model's inputs and outputs.
func (in *Instance) Signature() infer.Signature { return in.sig }

// Close destroys the session and the tensors kept for it. It is
// idempotent.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() {
		in.dropSets(false)
		if err := in.session.Destroy(); err != nil {
			in.closeErr = fmt.Errorf("destroy onnxruntime session: %w", err)
		}
		if in.withOptional != nil {
			in.closeErr = errors.Join(in.closeErr, in.withOptional.Close())
		}
	})
	return in.closeErr
}

// Execute runs the model once. Inputs are matched to the model's inputs by
// name; each must be present exactly once, with the model's data type and a
// shape its signature allows. outputs names the outputs to return, in
// order; when empty, every output is returned in the model's order. The
// input tensors' Data must not change until Execute returns. The returned
// tensors' Data is owned by the caller.
//
// A model whose shapes all follow from the batch size runs on tensors kept
// per batch size (see ioSet): the inputs are copied in, the outputs copied
// out into one allocation. Other models, and batches too large to keep,
// run on tensors created for the call, which wrap aligned input memory
// without copying.
func (in *Instance) Execute(ctx context.Context, inputs []infer.Tensor, outputs []string) ([]infer.Tensor, error) {
	if in.withOptional != nil {
		if given := in.optionalGiven(inputs); given > 0 {
			if want := len(in.withOptional.sig.Inputs) - len(in.sig.Inputs); given != want {
				return nil, apierr.Errorf(apierr.KindUnsupported, ReasonOptionalInputs,
					"model '%s': give all of its %d initializer-backed inputs or none; %d given", in.model, want, given)
			}
			return in.withOptional.Execute(ctx, inputs, outputs)
		}
	}
	var orderBuf [8]*infer.Tensor
	ordered, err := in.orderInputs(inputs, orderBuf[:0])
	if err != nil {
		return nil, err
	}
	var wantBuf [8]int
	want, err := in.wantedOutputs(outputs, wantBuf[:0])
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, ctxError(err)
	}
	if in.pool.usable {
		if key, ok := in.setKey(ordered); ok {
			if s := in.takeSet(key); s != nil {
				result, err := in.executeSet(ctx, s, ordered, want)
				in.putSet(s)
				if err == nil || ctx.Err() != nil {
					return result, err
				}
				// The outputs may not have had the shapes the signature
				// predicts: run on per-call tensors, and if that works,
				// stop using sets for this model.
				result, err = in.executeWrapped(ctx, ordered, want)
				if err == nil {
					in.dropSets(true)
				}
				return result, err
			}
		}
	}
	return in.executeWrapped(ctx, ordered, want)
}

// executeWrapped runs checked inputs on tensors created for this call.
func (in *Instance) executeWrapped(ctx context.Context, ordered []*infer.Tensor, want []int) ([]infer.Tensor, error) {
	var err error
	values := make([]ort.Value, len(ordered))
	outs := make([]ort.Value, len(in.sig.Outputs))
	defer func() {
		for _, v := range values {
			destroy(v)
		}
		for _, v := range outs {
			destroy(v)
		}
	}()
	for i, t := range ordered {
		if values[i], err = newValue(t); err != nil {
			return nil, err
		}
	}
	guessed, err := in.preallocate(ordered, outs, true)
	if err != nil {
		return nil, err
	}
	if err := in.run(ctx, values, outs); err != nil {
		if !guessed || ctx.Err() != nil {
			return nil, err
		}
		// A shape taken from a like input was wrong: run again with only
		// the shapes the signature fixes.
		for j := range outs {
			destroy(outs[j])
			outs[j] = nil
		}
		if _, err := in.preallocate(ordered, outs, false); err != nil {
			return nil, err
		}
		if err := in.run(ctx, values, outs); err != nil {
			return nil, err
		}
	}

	result := make([]infer.Tensor, len(want))
	for i, j := range want {
		spec := in.sig.Outputs[j]
		if result[i], err = tensorFromValue(spec.Name, outs[j]); err != nil {
			return nil, &apierr.Error{
				Kind: apierr.KindInternal, Reason: ReasonBackendError,
				Msg: in.where("read output"), Err: err,
			}
		}
	}
	return result, nil
}

// run calls ONNX Runtime. When ctx can be cancelled, cancelling it asks
// ONNX Runtime to stop the run early.
func (in *Instance) run(ctx context.Context, values, outs []ort.Value) error {
	var err error
	if ctx.Done() == nil {
		err = in.session.Run(values, outs)
	} else {
		err = in.runCancellable(ctx, values, outs)
	}
	return in.runError(ctx, err)
}

// runError describes a failed run: cancelled, expired or broken.
func (in *Instance) runError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxError(ctxErr)
	}
	if errors.Is(err, ort.ZeroShapeLengthError) {
		// onnxruntime_go v1.27.0 cannot hand back rank-0 outputs.
		return apierr.Errorf(apierr.KindUnsupported, ReasonScalarOutput,
			"%s: an output is a scalar (rank 0) in the model, which this server's ONNX Runtime binding cannot return", in.where("run"))
	}
	return &apierr.Error{Kind: apierr.KindInternal, Reason: ReasonBackendError, Msg: in.where("run"), Err: err}
}

func (in *Instance) runCancellable(ctx context.Context, values, outs []ort.Value) error {
	ro, err := ort.NewRunOptions()
	if err != nil {
		return fmt.Errorf("create run options: %w", err)
	}
	var mu sync.Mutex // protects ro against Terminate after Destroy
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if ro != nil {
			// A failed Terminate leaves the run to finish on its own; the
			// caller still sees ctx's error once it returns.
			_ = ro.Terminate()
		}
	})
	defer func() {
		stop()
		mu.Lock()
		defer mu.Unlock()
		_ = ro.Destroy() // fails only on options that were never created
		ro = nil
	}()
	return in.session.RunWithOptions(values, outs, ro)
}

func (in *Instance) where(what string) string {
	return fmt.Sprintf("model '%s' version %d: onnxruntime %s", in.model, in.version, what)
}

// orderInputs checks the inputs against the signature and returns them in
// the model's input order.
// buf is scratch the result may use.
func (in *Instance) orderInputs(inputs []infer.Tensor, buf []*infer.Tensor) ([]*infer.Tensor, error) {
	ordered := slices.Grow(buf[:0], len(in.sig.Inputs))[:len(in.sig.Inputs)]
	clear(ordered)
	for i := range inputs {
		t := &inputs[i]
		j, ok := in.inputIdx[t.Name]
		if !ok {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonUnknownInput,
				"unexpected input '%s' for model '%s' (inputs: %v)", t.Name, in.model, names(in.sig.Inputs))
		}
		if ordered[j] != nil {
			return nil, apierr.Errorf(apierr.KindInvalid, apierr.ReasonDuplicateInput, "input '%s' given more than once", t.Name)
		}
		spec := in.sig.Inputs[j]
		if t.DataType != spec.DataType {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonDatatypeMismatch,
				"input '%s': expected datatype %s, got %s", t.Name, spec.DataType, t.DataType)
		}
		if !t.Shape.Matches(spec.Shape) {
			return nil, apierr.Errorf(apierr.KindInvalid, apierr.ReasonInvalidShape,
				"input '%s': expected shape %s, got %s", t.Name, spec.Shape, t.Shape)
		}
		if err := t.CheckSize(); err != nil {
			return nil, &apierr.Error{
				Kind: apierr.KindInvalid, Reason: ReasonInvalidSize,
				Msg: fmt.Sprintf("input '%s'", t.Name), Err: err,
			}
		}
		ordered[j] = t
	}
	for j, t := range ordered {
		if t == nil {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonMissingInput,
				"missing input '%s' for model '%s'", in.sig.Inputs[j].Name, in.model)
		}
	}
	return ordered, nil
}

// wantedOutputs maps output names to positions in the signature. buf is
// scratch the result may use; the result must not be changed.
func (in *Instance) wantedOutputs(outputs []string, buf []int) ([]int, error) {
	if len(outputs) == 0 {
		return in.all, nil
	}
	want := slices.Grow(buf[:0], len(outputs))[:len(outputs)]
	clear(want)
	for i, n := range outputs {
		j, ok := in.outputIdx[n]
		if !ok {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonUnknownOutput,
				"unknown output '%s' for model '%s' (outputs: %v)", n, in.model, names(in.sig.Outputs))
		}
		want[i] = j
	}
	return want, nil
}

// preallocate creates FP16 and BF16 output tensors up front when their
// shape can be predicted from the signature and the batch size.
// onnxruntime_go v1.27.0 cannot hand back such outputs when it allocates
// them itself (it copies half the bytes and fails with "not enough space"),
// so a model whose FP16 or BF16 outputs have variable inner dimensions
// fails at run time with that error.
//
// With likeInputs, an output whose signature shape has more variable
// dimensions than the batch takes the concrete shape of an input whose
// signature shape is the same pattern (an identity or element-wise
// model, as Triton's QA FP16 identity models); guessed reports whether it
// did, so that a failed run can be repeated without those guesses.
func (in *Instance) preallocate(inputs []*infer.Tensor, outs []ort.Value, likeInputs bool) (guessed bool, err error) {
	batch := int64(-2) // not yet computed
	for j, spec := range in.sig.Outputs {
		if len(spec.Shape) == 0 && likeInputs {
			// A rank-0 output the binding could not wrap once ONNX Runtime
			// made it: a scalar value of ours for it to fill. A model whose
			// signature says rank 0 for an output of unknown rank fails
			// this run, and the run again without guesses goes on as
			// before.
			v, err := newEmptyScalar(spec.DataType)
			if err != nil {
				return guessed, &apierr.Error{
					Kind: apierr.KindInternal, Reason: ReasonBackendError,
					Msg: in.where(fmt.Sprintf("allocate output '%s'", spec.Name)), Err: err,
				}
			}
			if v != nil {
				outs[j], guessed = v, true
			}
			continue
		}
		if spec.DataType != infer.FP16 && spec.DataType != infer.BF16 {
			continue
		}
		if batch == -2 {
			batch = batchSize(in.sig.Inputs, inputs)
		}
		shape, ok := guessOutputShape(spec.Shape, batch)
		if !ok && likeInputs {
			if shape, ok = in.likeInputShape(j, spec, inputs); ok {
				guessed = true
			}
		}
		if !ok {
			continue
		}
		n, err := shape.Elements()
		if err != nil {
			continue
		}
		buf := make([]byte, max(n*spec.DataType.Size(), 8))
		v, err := ort.NewCustomDataTensor(ort.Shape(shape), buf, ortCustomType(spec.DataType))
		if err != nil {
			return guessed, &apierr.Error{
				Kind: apierr.KindInternal, Reason: ReasonBackendError,
				Msg: in.where(fmt.Sprintf("allocate output '%s'", spec.Name)), Err: err,
			}
		}
		outs[j] = v
	}
	return guessed, nil
}

// likeInputShape returns the concrete shape of an input of the same data
// type whose signature shape equals the output's (same rank, same fixed
// dimensions, variable ones in the same places): the input at the
// output's own position when it matches (output j of an identity model
// with several inputs of one pattern, as Triton's QA zero models, is input
// j), else the first that does.
func (in *Instance) likeInputShape(j int, out infer.TensorSpec, inputs []*infer.Tensor) (infer.Shape, bool) {
	like := func(i int) bool {
		return i < len(in.sig.Inputs) && i < len(inputs) && inputs[i] != nil &&
			in.sig.Inputs[i].DataType == out.DataType && slices.Equal(in.sig.Inputs[i].Shape, out.Shape)
	}
	if like(j) {
		return inputs[j].Shape.Clone(), true
	}
	for i := range in.sig.Inputs {
		if like(i) {
			return inputs[i].Shape.Clone(), true
		}
	}
	return nil, false
}

// newValue wraps one input tensor for ONNX Runtime. Numeric data is shared,
// not copied, when it is aligned.
func newValue(t *infer.Tensor) (ort.Value, error) {
	if len(t.Shape) == 0 {
		// onnxruntime_go v1.27.0 refuses shapes without dimensions; its
		// Scalar values carry rank-0 tensors of the numeric types.
		v, ok, err := newScalarValue(t)
		if !ok {
			return nil, apierr.Errorf(apierr.KindUnsupported, ReasonScalarInput,
				"input '%s' is a %s scalar (rank 0) in the model: this server's ONNX Runtime binding passes rank-0 tensors of numeric and BOOL types only (a batching model whose input is [batch] with dims [1] works)", t.Name, t.DataType)
		}
		if err != nil {
			return nil, &apierr.Error{
				Kind: apierr.KindInternal, Reason: ReasonBackendError,
				Msg: fmt.Sprintf("input '%s': create onnxruntime scalar", t.Name), Err: err,
			}
		}
		return v, nil
	}
	shape := ort.Shape(t.Shape)
	var v ort.Value
	var err error
	switch t.DataType {
	case infer.FP32:
		v, err = ort.NewTensor(shape, viewAs[float32](t.Data))
	case infer.FP64:
		v, err = ort.NewTensor(shape, viewAs[float64](t.Data))
	case infer.Int8:
		v, err = ort.NewTensor(shape, viewAs[int8](t.Data))
	case infer.Int16:
		v, err = ort.NewTensor(shape, viewAs[int16](t.Data))
	case infer.Int32:
		v, err = ort.NewTensor(shape, viewAs[int32](t.Data))
	case infer.Int64:
		v, err = ort.NewTensor(shape, viewAs[int64](t.Data))
	case infer.Uint8:
		v, err = ort.NewTensor(shape, t.Data)
	case infer.Uint16:
		v, err = ort.NewTensor(shape, viewAs[uint16](t.Data))
	case infer.Uint32:
		v, err = ort.NewTensor(shape, viewAs[uint32](t.Data))
	case infer.Uint64:
		v, err = ort.NewTensor(shape, viewAs[uint64](t.Data))
	case infer.Bool:
		v, err = newCustom(shape, normalizeBool(t.Data), infer.Bool)
	case infer.FP16, infer.BF16:
		v, err = newCustom(shape, alignedBytes(t.Data, 2), t.DataType)
	case infer.Bytes:
		v, err = newStrings(t)
	default:
		return nil, apierr.Errorf(apierr.KindUnsupported, ReasonUnsupportedDatatype,
			"input '%s': datatype %s is not supported by the onnxruntime backend", t.Name, t.DataType)
	}
	if err != nil {
		if _, ok := errors.AsType[*apierr.Error](err); ok {
			return nil, err
		}
		return nil, &apierr.Error{
			Kind: apierr.KindInternal, Reason: ReasonBackendError,
			Msg: fmt.Sprintf("input '%s': create onnxruntime tensor", t.Name), Err: err,
		}
	}
	return v, nil
}

// newCustom wraps raw bytes. onnxruntime_go refuses an empty buffer even
// for a shape with no elements, so those get a few spare bytes.
func newCustom(shape ort.Shape, data []byte, dt infer.DataType) (ort.Value, error) {
	if len(data) == 0 {
		data = make([]byte, 8)
	}
	return ort.NewCustomDataTensor(shape, data, ortCustomType(dt))
}

func newStrings(t *infer.Tensor) (ort.Value, error) {
	ss, err := bytesToStrings(t.Name, t.Data)
	if err != nil {
		return nil, err
	}
	st, err := ort.NewStringTensor(ort.Shape(t.Shape))
	if err != nil {
		return nil, err
	}
	if err := st.SetContents(ss); err != nil {
		_ = st.Destroy() // releasing a created tensor cannot fail
		return nil, err
	}
	return st, nil
}

// tensorFromValue converts an output. The bytes of numeric outputs are the
// Go slice onnxruntime_go copied them into, reinterpreted without a second
// copy; that slice is plain Go memory, so it outlives the Value.
func tensorFromValue(name string, v ort.Value) (infer.Tensor, error) {
	if dt, data, ok := scalarBytes(v); ok {
		return infer.Tensor{Name: name, DataType: dt, Shape: infer.Shape{}, Data: data}, nil
	}
	t := infer.Tensor{Name: name, Shape: infer.Shape(v.GetShape())}
	switch x := v.(type) {
	case *ort.Tensor[float32]:
		t.DataType, t.Data = infer.FP32, asBytes(x.GetData())
	case *ort.Tensor[float64]:
		t.DataType, t.Data = infer.FP64, asBytes(x.GetData())
	case *ort.Tensor[int8]:
		t.DataType, t.Data = infer.Int8, asBytes(x.GetData())
	case *ort.Tensor[int16]:
		t.DataType, t.Data = infer.Int16, asBytes(x.GetData())
	case *ort.Tensor[int32]:
		t.DataType, t.Data = infer.Int32, asBytes(x.GetData())
	case *ort.Tensor[int64]:
		t.DataType, t.Data = infer.Int64, asBytes(x.GetData())
	case *ort.Tensor[uint8]:
		t.DataType, t.Data = infer.Uint8, asBytes(x.GetData())
	case *ort.Tensor[uint16]:
		t.DataType, t.Data = infer.Uint16, asBytes(x.GetData())
	case *ort.Tensor[uint32]:
		t.DataType, t.Data = infer.Uint32, asBytes(x.GetData())
	case *ort.Tensor[uint64]:
		t.DataType, t.Data = infer.Uint64, asBytes(x.GetData())
	case *ort.Tensor[bool]:
		t.DataType, t.Data = infer.Bool, asBytes(x.GetData())
	case *ort.CustomDataTensor:
		dt, err := fromORTType(ort.TensorElementDataType(x.DataType()))
		if err != nil {
			return infer.Tensor{}, fmt.Errorf("output '%s': %w", name, err)
		}
		n, err := t.Shape.Elements()
		if err != nil {
			return infer.Tensor{}, fmt.Errorf("output '%s': %w", name, err)
		}
		data := x.GetData()
		if len(data) > n*dt.Size() {
			data = data[:n*dt.Size()] // spare bytes of an empty preallocated tensor
		}
		if err := checkOutputBytes(name, dt, t.Shape, data); err != nil {
			return infer.Tensor{}, err
		}
		t.DataType, t.Data = dt, data
	case *ort.StringTensor:
		ss, err := x.GetContents()
		if err != nil {
			return infer.Tensor{}, fmt.Errorf("output '%s': read strings: %w", name, err)
		}
		t.DataType, t.Data = infer.Bytes, stringsToBytes(ss)
	default:
		return infer.Tensor{}, fmt.Errorf("output '%s' is not a tensor (ONNX type %s)", name, v.GetONNXType())
	}
	return t, nil
}

// destroy releases v. onnxruntime_go can leave a typed nil pointer in an
// output slot when it fails to convert that output, so nil pointers inside
// the interface are skipped too.
func destroy(v ort.Value) {
	if v == nil {
		return
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return
	}
	_ = v.Destroy() // releasing a created value cannot fail
}

// ctxError describes a cancelled or expired request.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &apierr.Error{Kind: apierr.KindTimeout, Reason: apierr.ReasonDeadlineExceeded, Msg: "inference deadline exceeded", Err: err}
	}
	return &apierr.Error{Kind: apierr.KindUnavailable, Reason: apierr.ReasonCanceled, Msg: "inference canceled", Err: err}
}

// optionalGiven counts the inputs that are initializer-backed inputs of
// the model (those withOptional has and the session does not).
func (in *Instance) optionalGiven(inputs []infer.Tensor) int {
	n := 0
	for i := range inputs {
		if _, required := in.inputIdx[inputs[i].Name]; required {
			continue
		}
		if _, ok := in.withOptional.inputIdx[inputs[i].Name]; ok {
			n++
		}
	}
	return n
}
