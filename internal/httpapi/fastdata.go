package httpapi

import (
	"encoding/binary"
	"math"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/kservewire"
)

// appendScalar appends the scalar at the scanner's position to out, as
// appendElement does. FP32 and INT64 numbers, the common payloads, take
// kservewire's one-function scanners (no Number, no datatype switch per
// element); whatever those leave (malformed literals, values strconv must
// decide, other datatypes) goes to appendElement, which also words every
// error, so the two paths accept, round and reject alike.
func (d *decoder) appendScalar(out []byte, t *inputState, idx int) ([]byte, error) {
	s := &d.s
	switch t.dt {
	case infer.FP32:
		if f, end, ok := kservewire.ScanFloat32(s.buf, s.pos); ok {
			s.pos = end
			return binary.LittleEndian.AppendUint32(out, math.Float32bits(f)), nil
		}
	case infer.Int64:
		if v, end, ok := kservewire.ScanInt64(s.buf, s.pos); ok {
			s.pos = end
			return binary.LittleEndian.AppendUint64(out, uint64(v)), nil
		}
	}
	return d.appendElement(out, t, idx)
}
