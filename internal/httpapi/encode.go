package httpapi

import (
	"errors"
	"maps"
	"strconv"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/jsonenc"
	"github.com/sluice-ml/sluice/internal/kservewire"
	"github.com/sluice-ml/sluice/internal/shm"
)

// appendInferResponse appends the JSON of resp to dst. Outputs whose
// isBinary entry is true get a binary_data_size parameter and no "data";
// the caller sends their bytes after the JSON, in output order.
func appendInferResponse(dst []byte, resp *infer.Response, isBinary []bool) ([]byte, error) {
	if len(isBinary) != len(resp.Outputs) {
		return nil, apierr.Errorf(apierr.KindInternal, reasonInternal, "%d binary flags for %d outputs", len(isBinary), len(resp.Outputs))
	}
	dst = append(dst, `{"model_name":`...)
	dst = jsonenc.AppendString(dst, resp.Model)
	dst = append(dst, `,"model_version":`...)
	dst = jsonenc.AppendString(dst, resp.Version)
	if resp.ID != "" { // Triton leaves "id" out when the request had none
		dst = append(dst, `,"id":`...)
		dst = jsonenc.AppendString(dst, resp.ID)
	}
	if len(resp.Parameters) > 0 {
		var err error
		dst = append(dst, `,"parameters":`...)
		if dst, err = appendParams(dst, resp.Parameters, ""); err != nil {
			return nil, err
		}
	}
	dst = append(dst, `,"outputs":[`...)
	for i, bin := range isBinary {
		t := &resp.Outputs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		inSHM := t.Data == nil && shm.InRegion(t.Parameters) // written to a region: no data here
		if err := t.CheckSize(); err != nil && !inSHM {
			return nil, apierr.Errorf(apierr.KindInternal, reasonInternal, "output '%s': %v", t.Name, err)
		}
		dst = append(dst, `{"name":`...)
		dst = jsonenc.AppendString(dst, t.Name)
		dst = append(dst, `,"datatype":"`...)
		dst = append(dst, t.DataType.String()...)
		dst = append(dst, `","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, d, 10)
		}
		dst = append(dst, ']')
		if bin || len(t.Parameters) > 0 {
			params := t.Parameters
			if bin {
				params = make(infer.Parameters, len(t.Parameters)+1)
				maps.Copy(params, t.Parameters)
				params[paramBinaryDataSize] = int64(len(t.Data))
			}
			var err error
			dst = append(dst, `,"parameters":`...)
			if dst, err = appendParams(dst, params, t.Name); err != nil {
				return nil, err
			}
		}
		if !bin && !inSHM {
			var err error
			dst = append(dst, `,"data":`...)
			if dst, err = appendTensorData(dst, t); err != nil {
				return nil, err
			}
		}
		dst = append(dst, '}')
	}
	dst = append(dst, "]}"...)
	return dst, nil
}

// appendTensorData appends t's elements as a flat JSON array (the KServe
// JSON tensor encoding, kservewire.AppendJSONData). t's size has been
// checked.
func appendTensorData(dst []byte, t *infer.Tensor) ([]byte, error) {
	dst, err := kservewire.AppendJSONData(dst, t)
	if err == nil {
		return dst, nil
	}
	if nf, ok := errors.AsType[*kservewire.NonFiniteError](err); ok {
		return nil, unrepresentable(t.Name, nf.Index, nf.Value)
	}
	if nu, ok := errors.AsType[*kservewire.NotUTF8Error](err); ok {
		// Triton writes such bytes into the JSON unchanged and its client
		// then fails to decode the response; Sluice keeps the body valid
		// JSON and says why instead.
		return nil, apierr.Errorf(apierr.KindUnsupported, reasonUnrepresentable,
			"output '%s': element %d is not valid UTF-8, which JSON cannot represent; request binary output (parameter binary_data_output or binary_data)", t.Name, nu.Index)
	}
	return nil, apierr.Errorf(apierr.KindInternal, reasonInternal, "output '%s' has invalid datatype %s", t.Name, t.DataType)
}

// unrepresentable reports a NaN or infinity, which JSON cannot carry.
func unrepresentable(name string, idx int, f float64) error {
	return apierr.Errorf(apierr.KindUnsupported, reasonUnrepresentable,
		"output '%s': element %d is %v, which JSON cannot represent; request binary output (parameter binary_data_output or binary_data)", name, idx, f)
}

// appendParams appends a parameters object with sorted keys. owner is the
// output's name for errors ("" for the response).
func appendParams(dst []byte, p infer.Parameters, owner string) ([]byte, error) {
	dst, err := kservewire.AppendJSONParams(dst, p)
	if err == nil {
		return dst, nil
	}
	where := "response"
	if owner != "" {
		where = "output '" + owner + "'"
	}
	if nf, ok := errors.AsType[*kservewire.NonFiniteParamError](err); ok {
		return nil, apierr.Errorf(apierr.KindInternal, reasonUnrepresentable, "%s: parameter %q is %v, which JSON cannot represent", where, nf.Key, nf.Value)
	}
	return nil, apierr.Errorf(apierr.KindInternal, reasonInternal, "%s: %v", where, err)
}
