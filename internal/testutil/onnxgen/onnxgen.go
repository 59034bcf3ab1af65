// Package onnxgen writes small ONNX models for tests without Python: the
// ModelProto wire format (field numbers from ONNX's public onnx.proto)
// encoded with protowire. It covers what test graphs need: typed graph
// inputs and outputs (a negative dimension becomes a named symbolic one),
// initializers with raw data, and nodes with integer attributes.
package onnxgen

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// Element types of ONNX's TensorProto.DataType.
const (
	Float  int32 = 1
	Uint8  int32 = 2
	Int8   int32 = 3
	Int32  int32 = 6
	Int64  int32 = 7
	String int32 = 8
	Bool   int32 = 9
	Uint64 int32 = 13
)

// Value is a graph input or output. A negative dimension is symbolic.
type Value struct {
	Name string
	Type int32
	Dims []int64
}

// Tensor is an initializer; Raw is its little-endian data.
type Tensor struct {
	Name string
	Type int32
	Dims []int64
	Raw  []byte
}

// Node is one operator. Ints are integer attributes.
type Node struct {
	Op      string
	Inputs  []string
	Outputs []string
	Ints    map[string]int64
}

// Model is one graph in the default domain.
type Model struct {
	Opset        int64 // 0 means 13
	Inputs       []Value
	Outputs      []Value
	Initializers []Tensor
	Nodes        []Node
}

// Marshal encodes the model as an ONNX file's bytes.
func (m Model) Marshal() []byte {
	opset := m.Opset
	if opset == 0 {
		opset = 13
	}
	var g []byte
	for _, n := range m.Nodes {
		g = appendMsg(g, 1, node(n))
	}
	g = appendStr(g, 2, "test")
	for _, t := range m.Initializers {
		g = appendMsg(g, 5, tensor(t))
	}
	for _, v := range m.Inputs {
		g = appendMsg(g, 11, value(v))
	}
	for _, v := range m.Outputs {
		g = appendMsg(g, 12, value(v))
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType) // ir_version
	b = protowire.AppendVarint(b, 8)
	b = appendStr(b, 2, "sluice-onnxgen")
	b = appendMsg(b, 7, g)
	var os []byte
	os = appendStr(os, 1, "")
	os = protowire.AppendTag(os, 2, protowire.VarintType)
	os = protowire.AppendVarint(os, uint64(opset))
	return appendMsg(b, 8, os)
}

func node(n Node) []byte {
	var b []byte
	for _, in := range n.Inputs {
		b = appendStr(b, 1, in)
	}
	for _, out := range n.Outputs {
		b = appendStr(b, 2, out)
	}
	b = appendStr(b, 4, n.Op)
	keys := make([]string, 0, len(n.Ints))
	for k := range n.Ints {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var a []byte
		a = appendStr(a, 1, k)
		a = protowire.AppendTag(a, 3, protowire.VarintType)
		a = protowire.AppendVarint(a, uint64(n.Ints[k]))
		a = protowire.AppendTag(a, 20, protowire.VarintType) // type INT
		a = protowire.AppendVarint(a, 2)
		b = appendMsg(b, 5, a)
	}
	return b
}

func tensor(t Tensor) []byte {
	var b []byte
	for _, d := range t.Dims {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.Type))
	b = appendStr(b, 8, t.Name)
	return appendMsg(b, 9, t.Raw)
}

func value(v Value) []byte {
	var shape []byte
	for i, d := range v.Dims {
		var dim []byte
		if d < 0 {
			dim = appendStr(dim, 2, "d"+strconv.Itoa(i))
		} else {
			dim = protowire.AppendTag(dim, 1, protowire.VarintType)
			dim = protowire.AppendVarint(dim, uint64(d))
		}
		shape = appendMsg(shape, 1, dim)
	}
	var tt []byte
	tt = protowire.AppendTag(tt, 1, protowire.VarintType)
	tt = protowire.AppendVarint(tt, uint64(v.Type))
	tt = appendMsg(tt, 2, shape)
	var typ []byte
	typ = appendMsg(typ, 1, tt)
	var b []byte
	b = appendStr(b, 1, v.Name)
	return appendMsg(b, 2, typ)
}

func appendStr(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMsg(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// Int32s encodes values as raw little-endian INT32 data.
func Int32s(vs ...int32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// Float32s encodes values as raw little-endian FLOAT data.
func Float32s(vs ...float32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// Accumulator is a Triton-style stateful test model, batching along the
// first dimension: INT32 inputs INPUT, START and READY (controls) and
// INPUT_STATE (an implicit state), each [-1,1]. Per row it computes
//
//	state = READY ? (START ? INPUT : INPUT_STATE + INPUT) : INPUT_STATE
//
// and returns it as OUTPUT and OUTPUT_STATE: the running sum of a
// sequence's inputs. With corrID set (Uint64, Int64 or String) it also has
// the input CORRID of that type and echoes it as CORRID_OUT.
func Accumulator(corrID int32) Model {
	col := []int64{-1, 1}
	m := Model{
		Inputs: []Value{
			{Name: "INPUT", Type: Int32, Dims: col},
			{Name: "START", Type: Int32, Dims: col},
			{Name: "READY", Type: Int32, Dims: col},
			{Name: "INPUT_STATE", Type: Int32, Dims: col},
		},
		Outputs: []Value{
			{Name: "OUTPUT", Type: Int32, Dims: col},
			{Name: "OUTPUT_STATE", Type: Int32, Dims: col},
		},
		Nodes: []Node{
			{Op: "Cast", Inputs: []string{"START"}, Outputs: []string{"start_b"}, Ints: map[string]int64{"to": int64(Bool)}},
			{Op: "Cast", Inputs: []string{"READY"}, Outputs: []string{"ready_b"}, Ints: map[string]int64{"to": int64(Bool)}},
			{Op: "Add", Inputs: []string{"INPUT_STATE", "INPUT"}, Outputs: []string{"sum"}},
			{Op: "Where", Inputs: []string{"start_b", "INPUT", "sum"}, Outputs: []string{"started"}},
			{Op: "Where", Inputs: []string{"ready_b", "started", "INPUT_STATE"}, Outputs: []string{"OUTPUT_STATE"}},
			{Op: "Identity", Inputs: []string{"OUTPUT_STATE"}, Outputs: []string{"OUTPUT"}},
		},
	}
	if corrID != 0 {
		m.Inputs = append(m.Inputs, Value{Name: "CORRID", Type: corrID, Dims: col})
		m.Outputs = append(m.Outputs, Value{Name: "CORRID_OUT", Type: corrID, Dims: col})
		m.Nodes = append(m.Nodes, Node{Op: "Identity", Inputs: []string{"CORRID"}, Outputs: []string{"CORRID_OUT"}})
	}
	return m
}
