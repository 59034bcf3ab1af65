package modelrepo

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// DefaultMaxOutputBytes is the most output bytes (tensor data, all
// outputs together) one request may get from a model unless the model's
// config or the server says otherwise: 64 MiB, config's (the default of
// --max-output-bytes and model_server.max_output_bytes).
const DefaultMaxOutputBytes = config.DefaultMaxOutputBytes

// ParamMaxOutputBytes is the config.pbtxt parameter that sets a model's
// own maximum output per request, in bytes:
//
//	parameters { key: "max_output_bytes" value { string_value: "1048576" } }
const ParamMaxOutputBytes = "max_output_bytes"

// maxOutputBytes reads a model's maximum output per request: its
// max_output_bytes parameter, else the server's default.
func maxOutputBytes(cfg *inferencepb.ModelConfig, serverDefault int64) (int64, error) {
	p, ok := cfg.GetParameters()[ParamMaxOutputBytes]
	if !ok {
		return serverDefault, nil
	}
	v := strings.TrimSpace(p.GetStringValue())
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("parameter %s: %q is not a positive number of bytes", ParamMaxOutputBytes, v)
	}
	return n, nil
}

// checkOutputSize refuses outputs larger than the version's maximum,
// before any edge encodes them.
func (lv *loaded) checkOutputSize(outs []infer.Tensor) *apierr.Error {
	var n int64
	for i := range outs {
		n += int64(len(outs[i].Data))
	}
	if n > lv.maxOutput {
		return outputTooLarge(lv.model, n, lv.maxOutput)
	}
	return nil
}

func outputTooLarge(model string, n, limit int64) *apierr.Error {
	return apierr.Errorf(apierr.KindResourceExhausted, apierr.ReasonResponseTooLarge,
		"model '%s': the outputs of this request are %d bytes, over the model's maximum of %d (config.pbtxt parameter %s, or the server's --max-output-bytes)",
		model, n, limit, ParamMaxOutputBytes)
}

func (m *Manager) maxOutputDefault() int64 {
	if m.opts.MaxOutputBytes > 0 {
		return m.opts.MaxOutputBytes
	}
	return DefaultMaxOutputBytes
}
