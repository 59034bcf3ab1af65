package servingapi

import (
	"bytes"
	"encoding/json"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

// decodeRequestColumn decodes one request data column: a JSON list of
// values of type t (null allowed), at most maxRows of them.
func decodeRequestColumn(name string, msg json.RawMessage, t feature.Type, maxRows int) ([]feature.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	var arr []any
	if err := dec.Decode(&arr); err != nil || arr == nil {
		return nil, invalidf(serving.ReasonInvalidRequestValue, "request data '%s': want a list of %s values, one per entity row", name, t)
	}
	if len(arr) > maxRows {
		return nil, apierr.Errorf(apierr.KindResourceExhausted, serving.ReasonTooManyEntityRows,
			"request data '%s' has %d values: a request may read at most %d entity rows; split it into several requests", name, len(arr), maxRows)
	}
	out := make([]feature.Value, len(arr))
	for i, x := range arr {
		v, err := serving.ToValue(x, t)
		if err != nil {
			return nil, invalidf(serving.ReasonInvalidRequestValue, "request data '%s' value %d: %v", name, i, err)
		}
		out[i] = v
	}
	return out, nil
}
