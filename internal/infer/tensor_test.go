package infer

import (
	"errors"
	"testing"
)

func TestShapeElements(t *testing.T) {
	tests := []struct {
		name    string
		shape   Shape
		want    int
		wantErr bool
	}{
		{name: "scalar", shape: Shape{}, want: 1},
		{name: "matrix", shape: Shape{2, 128}, want: 256},
		{name: "zero dim", shape: Shape{0, 16}, want: 0},
		{name: "negative", shape: Shape{-1, 16}, wantErr: true},
		{name: "overflow", shape: Shape{1 << 20, 1 << 20, 1 << 20}, wantErr: true},
		{name: "just over the cap", shape: Shape{MaxElements + 1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.shape.Elements()
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Elements(%v) = %d, %v; want %d, error %v", tt.shape, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestShapeMatches(t *testing.T) {
	if !(Shape{4, 128}).Matches(Shape{-1, 128}) {
		t.Error("[4,128] should match [-1,128]")
	}
	if (Shape{4, 127}).Matches(Shape{-1, 128}) || (Shape{4}).Matches(Shape{-1, 128}) {
		t.Error("a different dim or rank must not match")
	}
	if got := (Shape{-1, 128}).String(); got != "[-1,128]" {
		t.Errorf("String = %q", got)
	}
}

func TestCheckSize(t *testing.T) {
	twoStrings := AppendBytesElement(AppendBytesElement(nil, []byte("ab")), []byte(""))
	tests := []struct {
		name    string
		tensor  Tensor
		wantErr bool
	}{
		{name: "fp32 exact", tensor: Tensor{DataType: FP32, Shape: Shape{2, 2}, Data: make([]byte, 16)}},
		{name: "fp32 short", tensor: Tensor{DataType: FP32, Shape: Shape{2, 2}, Data: make([]byte, 15)}, wantErr: true},
		{name: "bool", tensor: Tensor{DataType: Bool, Shape: Shape{3}, Data: []byte{0, 1, 1}}},
		{name: "bytes exact", tensor: Tensor{DataType: Bytes, Shape: Shape{2}, Data: twoStrings}},
		{name: "bytes count differs", tensor: Tensor{DataType: Bytes, Shape: Shape{3}, Data: twoStrings}, wantErr: true},
		{name: "bytes truncated prefix", tensor: Tensor{DataType: Bytes, Shape: Shape{1}, Data: []byte{1, 0}}, wantErr: true},
		{name: "bytes overrun", tensor: Tensor{DataType: Bytes, Shape: Shape{1}, Data: []byte{9, 0, 0, 0, 'a'}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.tensor.CheckSize()
			if (err != nil) != tt.wantErr {
				t.Fatalf("CheckSize = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && tt.tensor.Shape[0] >= 0 && !errors.Is(err, ErrSize) {
				t.Errorf("error %v does not wrap ErrSize", err)
			}
		})
	}
}

func TestSplitBytesRoundTrip(t *testing.T) {
	elems := [][]byte{[]byte("hello"), {}, {0, 255, 10}}
	var buf []byte
	for _, e := range elems {
		buf = AppendBytesElement(buf, e)
	}
	got, err := SplitBytes(buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(elems) {
		t.Fatalf("got %d elements, want %d", len(got), len(elems))
	}
	for i := range elems {
		if string(got[i]) != string(elems[i]) {
			t.Errorf("element %d = %q, want %q", i, got[i], elems[i])
		}
	}
	if n, err := CountBytesElements(buf); err != nil || n != 3 {
		t.Errorf("CountBytesElements = %d, %v", n, err)
	}
}

func TestDataTypes(t *testing.T) {
	for d := Bool; d <= BF16; d++ {
		got, ok := ParseDataType(d.String())
		if !ok || got != d {
			t.Errorf("ParseDataType(%q) = %v, %v", d.String(), got, ok)
		}
	}
	if _, ok := ParseDataType("FP33"); ok {
		t.Error("FP33 parsed")
	}
	if _, ok := ParseDataType("INVALID"); ok {
		t.Error("INVALID parsed as a data type")
	}
	if FP16.Size() != 2 || Bytes.Size() != 0 || Int64.Size() != 8 {
		t.Error("sizes wrong")
	}
}
