package httpapi

import "github.com/sluice-ml/sluice/internal/infer"

// responseBytes bounds the memory an inference response holds while it is
// written: the outputs themselves, their encoding (binary outputs as they
// are, the others as JSON text at most maxJSONChars per element) and,
// when compressed, the compressed copy, which is never much larger than
// its input. This is what the response is charged to the in-flight
// budget before it is built.
func responseBytes(resp *infer.Response, isBinary []bool, compressed bool) int64 {
	var held, encoded int64 = 0, 512 // the envelope: names, version, id
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		n := int64(len(t.Data))
		held += n
		encoded += 256 + int64(len(t.Name)) // name, datatype, shape, parameters
		if i < len(isBinary) && isBinary[i] {
			encoded += n
			continue
		}
		encoded += jsonBound(t.DataType, n)
	}
	if compressed {
		encoded += encoded/8 + 1024 // the compressed copy: deflate expands incompressible input by well under an eighth
	}
	return held + encoded
}

// jsonBound is the most JSON text n bytes of tensor data of type dt
// become: each element's longest form and its comma.
func jsonBound(dt infer.DataType, n int64) int64 {
	if dt == infer.Bytes {
		// A 4-byte length prefix per element; each content byte is at most
		// six characters (\u00XX), each element two quotes and a comma.
		return 6 * n
	}
	size := int64(dt.Size())
	if size <= 0 {
		return 6 * n
	}
	return n / size * maxJSONChars(dt)
}

// maxJSONChars is the longest JSON form of one element, comma included.
func maxJSONChars(dt infer.DataType) int64 {
	switch dt {
	case infer.Bool:
		return 6 // false,
	case infer.Int8, infer.Uint8:
		return 5
	case infer.Int16, infer.Uint16:
		return 7
	case infer.Int32, infer.Uint32:
		return 12
	case infer.Int64, infer.Uint64:
		return 21
	case infer.FP64:
		return 25 // -2.2250738585072014e-308,
	default: // FP32, FP16, BF16
		return 16 // -1.17549435e-38,
	}
}
