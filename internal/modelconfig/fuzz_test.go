package modelconfig

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// FuzzParse checks that no input makes Parse (and what runs after it)
// panic, that every failure is a list of problems, and that a parsed
// config survives being written out as text and as JSON.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`name: "m" max_batch_size: 2 input { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] }`))
	f.Add([]byte("input [ { name: \"a\" ] }"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, src, err := Parse("config.pbtxt", data)
		if src == nil {
			t.Fatal("Parse returned no Source")
		}
		_ = src.Pos("input[0].dims[0]")
		if err != nil {
			var ps Errors
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("parse error is not a list of problems: %v", err)
			}
			return
		}
		text, err := prototext.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal parsed config: %v", err)
		}
		again, _, err := Parse("again.pbtxt", text)
		if err != nil {
			t.Fatalf("parse re-marshalled config: %v\n%s", err, text)
		}
		if !proto.Equal(cfg, again) {
			t.Fatalf("text round trip changed the config:\n%v\n%v", cfg, again)
		}

		ApplyDefaults(cfg, "m")
		_ = Validate(cfg, src)
		_ = ClientSignature(cfg)
		js, err := MarshalJSON(cfg)
		if err != nil {
			t.Fatalf("marshal JSON: %v", err)
		}
		back, err := ParseJSON(js)
		if err != nil {
			t.Fatalf("parse JSON we wrote: %v\n%s", err, js)
		}
		if !proto.Equal(cfg, back) {
			t.Fatalf("JSON round trip changed the config:\n%v\n%v", cfg, back)
		}
	})
}
