// Package onnxruntime runs ONNX models with ONNX Runtime through
// github.com/yalue/onnxruntime_go, which opens libonnxruntime.so.1 with
// dlopen at start-up. The binary therefore builds without the library, but
// it needs cgo: a CGO_ENABLED=0 build compiles a stub whose New reports that
// the backend is not built in.
//
// Tensors cross the boundary in the KServe v2 wire layout of package infer.
// A model whose tensors are all of fixed-size types, with every dimension
// known but the leading batch dimension, runs on input and output tensors
// kept per instance and batch size (up to 1 MiB a batch size, 16 MiB an
// instance): a call copies its inputs in and its outputs out into one Go
// allocation, and creates no ONNX Runtime value. Other models, and larger
// batches, run on tensors made for the call: numeric inputs are handed to
// ONNX Runtime without copying when their bytes are suitably aligned, and
// outputs are allocated by ONNX Runtime and copied once into Go memory.
//
// ONNX Runtime's environment is global to the process, so the package counts
// the Backends that use it and destroys it when the last one that created
// it closes.
package onnxruntime
