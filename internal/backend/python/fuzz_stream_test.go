package python

import (
	"encoding/binary"
	"testing"
)

// FuzzDecodeStreamed feeds decodeStreamed (a decoupled model's response
// frames) arbitrary payloads: it must fail cleanly or return tensors
// whose data fits their shapes.
func FuzzDecodeStreamed(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0})
	f.Add(append([]byte{2, 0, 0, 0, 0, 1}, encodeResponses([]response{{failed: true, errCode: 4, errMsg: "bad"}})[4:]...))
	f.Fuzz(func(t *testing.T, payload []byte) {
		st, err := decodeStreamed(payload)
		if err != nil || st.resp == nil {
			return
		}
		for _, o := range st.resp.outputs {
			if err := o.CheckSize(); err != nil {
				t.Fatalf("output %q: %v", o.Name, err)
			}
		}
	})
}

// FuzzDecodeBLS feeds decodeBLS (a model's BLS request) arbitrary
// payloads: it must fail cleanly or return inputs whose data fits their
// shapes.
func FuzzDecodeBLS(f *testing.F) {
	js := []byte(`{"model_name":"m","model_version":-1,"requested_output_names":["Y"],"parameters":{"a":1}}`)
	p := binary.LittleEndian.AppendUint32(nil, uint32(len(js)))
	p = append(p, js...)
	for len(p)%8 != 0 {
		p = append(p, 0)
	}
	f.Add(binary.LittleEndian.AppendUint32(p, 0))
	f.Fuzz(func(t *testing.T, payload []byte) {
		h, ins, err := decodeBLS(payload)
		if err != nil {
			return
		}
		for _, in := range ins {
			if err := in.CheckSize(); err != nil {
				t.Fatalf("input %q: %v", in.Name, err)
			}
		}
		_ = h.request(ins)
	})
}
