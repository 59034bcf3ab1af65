package python

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-ml/sluice/internal/infer"
)

// encodeResponses builds an opResult payload the way the worker does.
func encodeResponses(resps []response) []byte {
	var w frameWriter
	w.reset(opResult, 1)
	w.u32(uint32(len(resps)))
	for _, r := range resps {
		if r.failed {
			w.u8(respError)
			w.u8(r.errCode)
			w.u32(uint32(len(r.errMsg)))
			w.bytes([]byte(r.errMsg))
			continue
		}
		w.u8(respOK)
		w.u32(uint32(len(r.outputs)))
		for i := range r.outputs {
			if err := w.tensor(&r.outputs[i]); err != nil {
				panic(err)
			}
		}
	}
	bufs, err := w.finish(1 << 30)
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	for _, s := range bufs {
		b.Write(s)
	}
	return b.Bytes()[headerSize:]
}

func TestDecodeResponses(t *testing.T) {
	big := make([]byte, 4*1000)
	for i := range big {
		big[i] = byte(i)
	}
	var strs []byte
	strs = infer.AppendBytesElement(strs, []byte("a"))
	strs = infer.AppendBytesElement(strs, nil)
	want := []response{
		{outputs: []infer.Tensor{
			{Name: "Y", DataType: infer.FP32, Shape: infer.Shape{1000}, Data: big},
			{Name: "S", DataType: infer.Bytes, Shape: infer.Shape{2, 1}, Data: strs},
			{Name: "scalar", DataType: infer.Int8, Shape: infer.Shape{}, Data: []byte{7}},
		}},
		{failed: true, errCode: codeNotFound, errMsg: "no such thing"},
		{outputs: []infer.Tensor{}},
	}
	payload := encodeResponses(want)
	got, err := decodeResponses(payload, len(want))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d responses, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.failed != w.failed || g.errCode != w.errCode || g.errMsg != w.errMsg || len(g.outputs) != len(w.outputs) {
			t.Fatalf("response %d = %+v, want %+v", i, g, w)
		}
		for j := range w.outputs {
			a, b := g.outputs[j], w.outputs[j]
			if a.Name != b.Name || a.DataType != b.DataType || !slices.Equal(a.Shape, b.Shape) || !bytes.Equal(a.Data, b.Data) {
				t.Errorf("response %d tensor %d = %s %s %v (%d bytes), want %s %s %v (%d bytes)",
					i, j, a.Name, a.DataType, a.Shape, len(a.Data), b.Name, b.DataType, b.Shape, len(b.Data))
			}
		}
	}

	// Tensor data starts 8-aligned in the frame, so the worker can map
	// numpy arrays onto it.
	off := bytes.Index(payload, big[:64])
	if (off+headerSize)%8 != 0 {
		t.Errorf("tensor data at frame offset %d, want a multiple of 8", off+headerSize)
	}
}

func TestDecodeResponsesRejects(t *testing.T) {
	ok := encodeResponses([]response{{outputs: []infer.Tensor{{Name: "Y", DataType: infer.FP32, Shape: infer.Shape{2}, Data: make([]byte, 8)}}}})
	mutate := func(f func(b []byte) []byte) []byte { return f(slices.Clone(ok)) }
	tests := []struct {
		name    string
		payload []byte
		want    int
		wantErr string
	}{
		{name: "wrong count", payload: ok, want: 2, wantErr: "answered 1 responses for 2 requests"},
		{name: "truncated", payload: ok[:len(ok)-1], want: 1, wantErr: "truncated"},
		{name: "trailing bytes", payload: append(slices.Clone(ok), 0), want: 1, wantErr: "follow the last response"},
		{name: "size mismatch", payload: mutate(func(b []byte) []byte {
			// Shape [2] → [3]: 8 bytes no longer fit.
			i := bytes.Index(b, []byte{2, 0, 0, 0, 0, 0, 0, 0, 8})
			b[i] = 3
			return b
		}), want: 1, wantErr: "tensor data size does not match its shape"},
		{name: "bad data type", payload: mutate(func(b []byte) []byte {
			i := bytes.IndexByte(b, 'Y')
			b[i+1] = 99
			return b
		}), want: 1, wantErr: "unknown data type code 99"},
		{name: "bad status", payload: mutate(func(b []byte) []byte { b[4] = 7; return b }), want: 1, wantErr: "unknown status 7"},
		{name: "huge count", payload: []byte{0xff, 0xff, 0xff, 0x0f, 0}, want: 0x0fffffff, wantErr: "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeResponses(tt.payload, tt.want)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestReadFrame(t *testing.T) {
	var hdr [headerSize]byte
	f := smallFrame(opPong, 42, []byte("xyz"))
	got, err := readFrame(bytes.NewReader(f), &hdr, 1<<20)
	if err != nil || got.op != opPong || got.id != 42 || string(got.payload) != "xyz" {
		t.Fatalf("readFrame = %+v, %v", got, err)
	}
	tests := []struct {
		name    string
		frame   []byte
		wantErr string
	}{
		{name: "too large", frame: smallFrame(opPong, 1, make([]byte, 100)), wantErr: "exceeds the limit"},
		{name: "smaller than header", frame: func() []byte { b := smallFrame(opPong, 1, nil); binary.LittleEndian.PutUint32(b, 3); return b }(), wantErr: "smaller than its header"},
		{name: "reserved bytes", frame: func() []byte { b := smallFrame(opPong, 1, nil); b[6] = 1; return b }(), wantErr: "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readFrame(bytes.NewReader(tt.frame), &hdr, 64)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
	if _, err := readFrame(bytes.NewReader(f[:len(f)-1]), &hdr, 64); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated payload: %v, want io.ErrUnexpectedEOF", err)
	}
}

// A result frame over the result limit is skipped unread: the reader
// returns opOversize with the frame's size and the next frame is read in
// step, so the worker keeps serving (issue 22: a model's huge answer).
func TestReadFrameResultSkipsOversize(t *testing.T) {
	var hdr [headerSize]byte
	var stream []byte
	stream = append(stream, smallFrame(opResult, 7, make([]byte, 1000))...)
	stream = append(stream, smallFrame(opResult, 8, []byte("ok"))...)
	r := bytes.NewReader(stream)
	got, err := readFrameResult(r, &hdr, 1<<20, 100)
	if err != nil || got.op != opOversize || got.id != 7 || got.size != 1000+headerSize || got.payload != nil {
		t.Fatalf("oversized result = %+v, %v", got, err)
	}
	got, err = readFrameResult(r, &hdr, 1<<20, 100)
	if err != nil || got.op != opResult || got.id != 8 || string(got.payload) != "ok" {
		t.Fatalf("next frame = %+v, %v", got, err)
	}
	// Other frames keep the message limit.
	if got, err := readFrameResult(bytes.NewReader(smallFrame(opLog, 0, make([]byte, 1000))), &hdr, 1<<20, 100); err != nil || got.op != opLog {
		t.Fatalf("log frame = %+v, %v", got, err)
	}
}

func TestFrameWriterLimit(t *testing.T) {
	var w frameWriter
	w.reset(opExecute, 1)
	err := w.requests([]execRequest{{inputs: []infer.Tensor{{Name: "X", DataType: infer.Uint8, Shape: infer.Shape{4096}, Data: make([]byte, 4096)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.finish(1024); !errors.Is(err, errTooLarge) {
		t.Fatalf("finish = %v, want errTooLarge", err)
	}
}

// FuzzDecodeResponses feeds the decoder of what a worker answers (a
// child process that may run any code) arbitrary payloads: it must
// reject or decode, never panic, and what it decodes must be consistent.
func FuzzDecodeResponses(f *testing.F) {
	var strs []byte
	strs = infer.AppendBytesElement(strs, []byte("hi"))
	f.Add(encodeResponses([]response{{outputs: []infer.Tensor{
		{Name: "Y", DataType: infer.FP32, Shape: infer.Shape{1, 2}, Data: make([]byte, 8)},
		{Name: "S", DataType: infer.Bytes, Shape: infer.Shape{1}, Data: strs},
	}}}), uint8(1))
	f.Add(encodeResponses([]response{{failed: true, errCode: 4, errMsg: "bad"}, {outputs: nil}}), uint8(2))
	f.Add([]byte{1, 0, 0, 0, 0, 1, 0, 0, 0}, uint8(1))
	f.Fuzz(func(t *testing.T, payload []byte, want uint8) {
		resps, err := decodeResponses(payload, int(want))
		if err != nil {
			return
		}
		if len(resps) != int(want) {
			t.Fatalf("%d responses, want %d", len(resps), want)
		}
		for _, r := range resps {
			for _, tn := range r.outputs {
				if err := tn.CheckSize(); err != nil {
					t.Fatalf("decoded tensor %s fails CheckSize: %v", tn.Name, err)
				}
			}
		}
	})
}

// FuzzReadFrame: any byte stream is a frame, an error, or EOF.
func FuzzReadFrame(f *testing.F) {
	f.Add(smallFrame(opResult, 3, []byte{0, 0, 0, 0}))
	f.Add(smallFrame(opLog, 0, []byte(`{"level":"info","msg":"x"}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var hdr [headerSize]byte
		r := bytes.NewReader(data)
		for range 16 {
			fr, err := readFrameResult(r, &hdr, 1<<16, 64)
			if err != nil {
				return
			}
			if len(fr.payload) > 1<<16 {
				t.Fatalf("payload of %d bytes over the limit", len(fr.payload))
			}
			if fr.op == opResult && len(fr.payload) > 64-headerSize {
				t.Fatalf("result of %d bytes over the result limit", len(fr.payload))
			}
		}
	})
}
